-- checkpoint_windows: one row per checkpoint attempt, from the moment rollout admission closed for
-- it to the moment it reopened (the interval a rollout deadline can collide with; P1 in
-- docs/domain/incidents.md). The window is the union of the RL admission fence (rl.admission.fence
-- owned by the gym checkpoint) and every participant's gym.checkpoint.open interval; end_ns is
-- NULL while any of them is open. A checkpoint that has neither interval (the draft checkpoint
-- telemetry alone: operations, no admission spans) is open from its first prepare or restore to
-- the end of its last resume, the points where participants close and reopen admission.
-- outcome: 'open' while the window is open; otherwise the RL snapshot transaction's outcome
-- (published -> committed, aborted, failed); without one, derived from the operations: a
-- controller commit that succeeded -> committed, any failed operation -> failed, else aborted.
CREATE OR REPLACE VIEW checkpoint_windows AS
WITH intervals AS (
    SELECT run_id, checkpoint_id, start_ns, end_ns
    FROM all_spans
    -- both names first, on their own: DuckDB prunes the spans on them (an OR is tested on
    -- every span)
    WHERE checkpoint_id IS NOT NULL AND name IN ('gym.checkpoint.open', 'rl.admission.fence')
      AND (name = 'gym.checkpoint.open'
           OR coalesce(attributes->>'nemo.rl.fence.owner', 'gym_checkpoint') = 'gym_checkpoint')
),
op_intervals AS (
    SELECT run_id, checkpoint_id,
           min(start_ns) FILTER (WHERE op IN ('prepare', 'restore')) AS start_ns,
           CASE WHEN bool_or(op = 'resume' AND end_ns IS NULL) THEN NULL
                ELSE max(end_ns) FILTER (WHERE op = 'resume') END AS end_ns
    FROM checkpoint_ops
    WHERE checkpoint_id IS NOT NULL
    GROUP BY run_id, checkpoint_id
    HAVING min(start_ns) FILTER (WHERE op IN ('prepare', 'restore')) IS NOT NULL
),
snapshot AS (
    SELECT run_id, checkpoint_id,
           min(start_ns) AS start_ns,
           CASE WHEN bool_or(end_ns IS NULL) THEN NULL ELSE max(end_ns) END AS end_ns,
           max(TRY_CAST(attributes->>'nemo.rl.snapshot.index' AS INTEGER)) AS snapshot_index,
           arg_max(attributes->>'nemo.rl.snapshot.outcome', start_ns) AS snapshot_outcome
    FROM all_spans
    WHERE name = 'rl.rollout_snapshot' AND checkpoint_id IS NOT NULL
    GROUP BY run_id, checkpoint_id
),
admission AS (
    SELECT run_id, checkpoint_id,
           min(start_ns) AS start_ns,
           CASE WHEN bool_or(end_ns IS NULL) THEN NULL ELSE max(end_ns) END AS end_ns
    FROM (SELECT * FROM intervals
          UNION ALL
          SELECT o.* FROM op_intervals o
          WHERE NOT EXISTS (SELECT 1 FROM intervals i WHERE i.run_id = o.run_id
                                                         AND i.checkpoint_id = o.checkpoint_id)
            AND NOT EXISTS (SELECT 1 FROM snapshot s WHERE s.run_id = o.run_id
                                                        AND s.checkpoint_id = o.checkpoint_id))
    GROUP BY run_id, checkpoint_id
),
ops AS (
    SELECT run_id, checkpoint_id,
           bool_or(op = 'commit' AND outcome = 'ok' AND participant_kind = 'controller')
               AS controller_committed,
           bool_or(outcome = 'error') AS any_error
    FROM checkpoint_ops
    GROUP BY run_id, checkpoint_id
),
windows AS (
    SELECT coalesce(a.run_id, s.run_id) AS run_id,
           coalesce(a.checkpoint_id, s.checkpoint_id) AS checkpoint_id,
           s.snapshot_index,
           coalesce(a.start_ns, s.start_ns) AS start_ns,
           CASE WHEN a.run_id IS NOT NULL THEN a.end_ns ELSE s.end_ns END AS end_ns,
           s.snapshot_outcome
    FROM admission a
    FULL OUTER JOIN snapshot s
        ON a.run_id = s.run_id AND a.checkpoint_id = s.checkpoint_id
)
SELECT
    w.run_id,
    w.checkpoint_id,
    w.snapshot_index,
    w.start_ns,
    w.end_ns,
    CASE
        WHEN w.end_ns IS NULL THEN 'open'
        WHEN w.snapshot_outcome = 'published' THEN 'committed'
        WHEN w.snapshot_outcome IN ('aborted', 'failed') THEN w.snapshot_outcome
        WHEN o.controller_committed THEN 'committed'
        WHEN o.any_error THEN 'failed'
        ELSE 'aborted'
    END AS outcome,
    (w.end_ns - w.start_ns) / 1e9 AS duration_s
FROM windows w
LEFT JOIN ops o ON o.run_id = w.run_id AND o.checkpoint_id = w.checkpoint_id
