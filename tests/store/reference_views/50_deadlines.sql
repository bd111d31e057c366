-- deadlines: one row per RL deadline (_Deadline instance, rl.deadline;
-- docs/domain/rollouts-and-deadlines.md#deadlines). outcome: completed (the guarded work finished
-- in time), fired, cancelled, error, or 'open' while the deadline is alive. suspended_s is the
-- time the deadline spent suspended by a holder (colocated training, or a gym checkpoint with the
-- pause fix); state_when_fired is what the guarded rollout was doing when it fired (running |
-- parked | held | unknown); fired_ns is the instant it fired.
CREATE OR REPLACE VIEW deadlines AS
WITH fire AS (
    SELECT run_id, trace_id, span_id,
           min(ts_ns) AS fired_ns,
           arg_min(attributes->>'nemo.rl.deadline.state_when_fired', ts_ns) AS state_when_fired
    FROM span_events
    WHERE name = 'rl.deadline.fire'
    GROUP BY run_id, trace_id, span_id
)
SELECT
    d.run_id,
    coalesce(d.attributes->>'nemo.rl.deadline.id', d.span_id) AS deadline_id,
    d.deadline_kind AS kind,
    d.rollout_id,
    d.attempt,
    d.prompt_idx,
    TRY_CAST(d.attributes->>'nemo.rl.deadline.budget_s' AS DOUBLE) AS budget_s,
    d.start_ns,
    d.end_ns,
    CASE WHEN d.end_ns IS NULL THEN 'open'
         ELSE coalesce(d.deadline_outcome,
                       CASE WHEN f.fired_ns IS NOT NULL THEN 'fired' ELSE 'completed' END)
    END AS outcome,
    coalesce(TRY_CAST(d.attributes->>'nemo.rl.deadline.suspended_s' AS DOUBLE), 0.0)
        AS suspended_s,
    coalesce(d.attributes->>'nemo.rl.deadline.state_when_fired', f.state_when_fired)
        AS state_when_fired,
    coalesce(f.fired_ns,
             CASE WHEN d.deadline_outcome = 'fired' THEN d.end_ns END)
        AS fired_ns,
    d.attributes->>'nemo.rl.deadline.description' AS description,
    d.span_id,
    d.is_open
FROM all_spans d
LEFT JOIN fire f ON f.run_id = d.run_id AND f.trace_id = d.trace_id AND f.span_id = d.span_id
WHERE d.name = 'rl.deadline'
