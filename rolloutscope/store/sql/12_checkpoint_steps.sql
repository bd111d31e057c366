-- checkpoint_steps: one row per timed step inside a checkpoint operation, the parts the draft
-- checkpoint telemetry (nemo_gym/_checkpoint/telemetry.py) times because they grow with the
-- live set: gym.checkpoint.wait_ready (under prepare), export and write (under commit), read
-- and install (under restore), and the controller's gym.checkpoint.coordinate.prepare.<kind>
-- (one per prepare stage). The draft stamps the checkpoint id, participant and instance on the
-- operation only, so a step takes them from its operation (its parent: same process).
-- step is the step's own name part (wait_ready, export, ..., or prepare.<kind>).
-- Read from checkpoint_spans (11_checkpoint_spans.sql: one row per gym.checkpoint.* span, kept
-- by the store as spans arrive), both the step and its parent.
CREATE OR REPLACE VIEW checkpoint_steps AS
SELECT
    s.run_id,
    coalesce(s.checkpoint_id, o.checkpoint_id) AS checkpoint_id,
    coalesce(s.participant_kind, o.participant_kind,
             CASE WHEN o.name LIKE 'gym.checkpoint.coordinate.%' THEN 'controller' END)
        AS participant_kind,
    coalesce(s.instance, o.instance) AS instance,
    CASE WHEN o.name LIKE 'gym.checkpoint.coordinate.%' THEN split_part(o.name, '.', 4)
         ELSE split_part(o.name, '.', 3) END AS op,
    CASE WHEN s.name LIKE 'gym.checkpoint.coordinate.prepare.%'
         THEN 'prepare.' || split_part(s.name, '.', 5)
         ELSE split_part(s.name, '.', 3) END AS step,
    s.start_ns,
    s.end_ns,
    CASE WHEN s.end_ns IS NULL THEN NULL
         WHEN s.status_code = 'ERROR' THEN 'error'
         ELSE coalesce(s.outcome_attr, 'ok') END AS outcome,
    s.bytes,
    s.records,
    s.participants,
    (s.end_ns - s.start_ns) / 1e9 AS duration_s,
    s.trace_id,
    s.span_id,
    s.parent_span_id,
    s.is_open
FROM checkpoint_spans s
LEFT JOIN checkpoint_spans o
    ON o.run_id = s.run_id AND o.trace_id = s.trace_id AND o.span_id = s.parent_span_id
WHERE s.name IN ('gym.checkpoint.wait_ready', 'gym.checkpoint.export', 'gym.checkpoint.write',
                 'gym.checkpoint.read', 'gym.checkpoint.install')
   OR s.name LIKE 'gym.checkpoint.coordinate.prepare.%'
