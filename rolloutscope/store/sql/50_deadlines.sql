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
),
-- Each deadline span with its fire event and its outcome: a left join of the spans with `fire`,
-- written as three branches that split the spans (those a fire event names; the others, ended;
-- the others, still open), so that where there is no fire event the outcome is the span's own
-- column. A reader's filter on outcome (outcome = 'fired') then reaches the scan of the spans and
-- the columns of the few that pass are all it reads, not those of every deadline of the run
-- (719k at 10M spans, read twice in `incidents`: P1, and P2's link to it). Each branch reads
-- all_spans itself: a CTE read by several would be materialized whole.
outcomes AS (
    SELECT d.*, f.fired_ns AS fire_ns, f.state_when_fired AS fire_state,
           CASE WHEN d.end_ns IS NULL THEN 'open'
                ELSE coalesce(d.deadline_outcome,
                              CASE WHEN f.fired_ns IS NOT NULL THEN 'fired' ELSE 'completed' END)
           END AS outcome
    FROM all_spans d
    JOIN fire f ON f.run_id = d.run_id AND f.trace_id = d.trace_id AND f.span_id = d.span_id
    WHERE d.name = 'rl.deadline'
    UNION ALL
    SELECT d.*, CAST(NULL AS BIGINT), CAST(NULL AS VARCHAR),
           coalesce(d.deadline_outcome, 'completed')
    FROM all_spans d
    ANTI JOIN fire f ON f.run_id = d.run_id AND f.trace_id = d.trace_id AND f.span_id = d.span_id
    WHERE d.name = 'rl.deadline' AND d.end_ns IS NOT NULL
    UNION ALL
    SELECT d.*, CAST(NULL AS BIGINT), CAST(NULL AS VARCHAR), 'open'
    FROM all_spans d
    ANTI JOIN fire f ON f.run_id = d.run_id AND f.trace_id = d.trace_id AND f.span_id = d.span_id
    WHERE d.name = 'rl.deadline' AND d.end_ns IS NULL
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
    d.outcome,
    coalesce(TRY_CAST(d.attributes->>'nemo.rl.deadline.suspended_s' AS DOUBLE), 0.0)
        AS suspended_s,
    coalesce(d.attributes->>'nemo.rl.deadline.state_when_fired', d.fire_state)
        AS state_when_fired,
    coalesce(d.fire_ns,
             CASE WHEN d.deadline_outcome = 'fired' THEN d.end_ns END)
        AS fired_ns,
    d.attributes->>'nemo.rl.deadline.description' AS description,
    d.span_id,
    d.is_open
FROM outcomes d
