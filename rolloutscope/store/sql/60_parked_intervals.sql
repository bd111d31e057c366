-- parked_intervals: one row per stay of an agent execution parked by a checkpoint
-- (gym.agent.parked; docs/domain/checkpoint-protocol.md#admission-parking-and-held-responses):
-- from the park (at a turn boundary, or without one) to the release at resume. end_ns is NULL
-- while the rollout is still parked.
CREATE OR REPLACE VIEW parked_intervals AS
SELECT
    run_id,
    rollout_id,
    attempt,
    prompt_idx,
    checkpoint_id,
    start_ns,
    end_ns,
    attributes->>'nemo.gym.agent.parked_boundary_state' AS boundary_state,
    TRY_CAST(attributes->>'nemo.gym.agent.boundary.index' AS INTEGER) AS boundary_index,
    (end_ns - start_ns) / 1e9 AS duration_s,
    span_id,
    is_open
FROM all_spans
WHERE name = 'gym.agent.parked'
