-- checkpoint_steps: one row per timed step inside a checkpoint operation, the parts the draft
-- checkpoint telemetry (nemo_gym/_checkpoint/telemetry.py) times because they grow with the
-- live set: gym.checkpoint.wait_ready (under prepare), export and write (under commit), read
-- and install (under restore), and the controller's gym.checkpoint.coordinate.prepare.<kind>
-- (one per prepare stage). The draft stamps the checkpoint id, participant and instance on the
-- operation only, so a step takes them from its operation (its parent: same process).
-- step is the step's own name part (wait_ready, export, ..., or prepare.<kind>).
CREATE OR REPLACE VIEW checkpoint_steps AS
SELECT
    s.run_id,
    coalesce(s.checkpoint_id, o.checkpoint_id) AS checkpoint_id,
    coalesce(s.participant_kind, o.participant_kind,
             CASE WHEN o.name LIKE 'gym.checkpoint.coordinate.%' THEN 'controller' END)
        AS participant_kind,
    coalesce(s.attributes->>'nemo.gym.checkpoint.instance',
             o.attributes->>'nemo.gym.checkpoint.instance') AS instance,
    CASE WHEN o.name LIKE 'gym.checkpoint.coordinate.%' THEN split_part(o.name, '.', 4)
         ELSE split_part(o.name, '.', 3) END AS op,
    CASE WHEN s.name LIKE 'gym.checkpoint.coordinate.prepare.%'
         THEN 'prepare.' || split_part(s.name, '.', 5)
         ELSE split_part(s.name, '.', 3) END AS step,
    s.start_ns,
    s.end_ns,
    CASE WHEN s.end_ns IS NULL THEN NULL
         WHEN s.status_code = 'ERROR' THEN 'error'
         ELSE coalesce(s.attributes->>'nemo.gym.checkpoint.outcome', 'ok') END AS outcome,
    TRY_CAST(s.attributes->>'nemo.gym.checkpoint.bytes' AS BIGINT) AS bytes,
    TRY_CAST(s.attributes->>'nemo.gym.checkpoint.records' AS BIGINT) AS records,
    TRY_CAST(s.attributes->>'nemo.gym.checkpoint.participants' AS INTEGER) AS participants,
    (s.end_ns - s.start_ns) / 1e9 AS duration_s,
    s.trace_id,
    s.span_id,
    s.parent_span_id,
    s.is_open
FROM all_spans s
LEFT JOIN (SELECT * FROM all_spans WHERE name LIKE 'gym.checkpoint.%') o
    ON o.run_id = s.run_id AND o.trace_id = s.trace_id AND o.span_id = s.parent_span_id
-- the prefix first: DuckDB prunes the spans on it alone (at 10M spans the OR below, tested on
-- every span, took 0.2 s of each read)
WHERE s.name LIKE 'gym.checkpoint.%'
  AND (s.name IN ('gym.checkpoint.wait_ready', 'gym.checkpoint.export', 'gym.checkpoint.write',
                  'gym.checkpoint.read', 'gym.checkpoint.install')
       OR s.name LIKE 'gym.checkpoint.coordinate.prepare.%')
