-- faults: one row per fault a replay injected (a shard killed idle or serving, a wedged engine, a
-- worker lost in commit, ...): the ground truth a live run cannot know, kept so a replay's
-- detection times can be measured from the fault. Empty for live and imported runs.
CREATE OR REPLACE VIEW faults AS
SELECT
    run_id,
    start_ns AS at_ns,
    attributes->>'rolloutscope.fault.kind' AS kind,
    attributes->>'rolloutscope.fault.detail' AS detail,
    shard_idx,
    prompt_idx,
    checkpoint_id,
    span_id
FROM all_spans
WHERE name = 'rolloutscope.fault'
