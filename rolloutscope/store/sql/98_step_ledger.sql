-- step_ledger: where each train step's wall time went (docs/train-steps.md#the-step-ledger), one
-- row per train_steps row, from per-step aggregations only (a run's tries are grouped here, never
-- read out row by row).
-- The wait is wait_start_ns (the trainer free to take a batch) to ready_ns (it has one). On the
-- 'rl' dialect the groups the step waited for are the tries committed (Gym: finished) after the
-- previous step had its batch and no later than this one had: groups. The last tenth of them
-- by commit time, at least one, are the stragglers (step_stragglers names them); bulk_ns is the
-- commit of the last group before them (wait_start_ns when every group is a straggler).
-- The step's wall time, start_ns to end_ns, splits without overlap into:
--   generating_s  the wait up to bulk_ns, less snapshot and weight-sync time in it
--                 (rl_telemetry: the buffer-starvation waits, or the sync path's
--                 collect_rollouts)
--   straggler_s   the wait after bulk_ns, less snapshot and weight-sync time in it
--   parked_s      the wait spent with rollout admission closed by a snapshot
--                 (checkpoint_windows: every running rollout parked)
--   refit_s       the wait spent in a weight sync (rl.weight_sync: its fence holds new
--                 rollouts back) and not in a snapshot; rl_telemetry: the refit bubble
--   train_s       ready_ns to end_ns (rl_telemetry: rewards, logprobs, advantages, data
--                 processing and policy update); a weight sync while the trainer trains costs
--                 the step nothing
--   checkpoint_s  rl_telemetry: saving the model checkpoint
--   other_s       what is left: time no span of the step accounts for (0 on the 'rl' dialect)
-- generation_bubble_s is the time in the step when no rollout was generating: no try
-- (rollout_attempts) running and no rollout batch (rl.<algorithm>.collect_rollouts /
-- .generation) or single-controller dispatch (rl.sc.generate_and_push) open; NULL for a run
-- with none of them.
CREATE OR REPLACE VIEW step_ledger AS
WITH steps AS (
    SELECT t.*,
           lag(t.ready_ns) OVER (PARTITION BY t.run_id ORDER BY t.start_ns, t.step)
               AS previous_ready_ns
    FROM train_steps t
),
commits AS (  -- each step's groups, ranked latest first
    SELECT s.run_id, s.span_id AS step_span_id, a.end_ns AS committed_ns,
           row_number() OVER (PARTITION BY s.run_id, s.span_id ORDER BY a.end_ns DESC,
                                                                     a.rollout_id DESC) AS rank,
           count(*) OVER (PARTITION BY s.run_id, s.span_id) AS groups
    FROM steps s
    JOIN rollout_attempts a ON a.run_id = s.run_id AND a.outcome IN ('committed', 'finished')
                           AND a.end_ns > coalesce(s.previous_ready_ns, -1)
                           AND a.end_ns <= s.ready_ns
),
bulk AS (
    SELECT run_id, step_span_id, max(groups) AS groups,
           greatest(1, CAST(ceil(max(groups) / 10.0) AS BIGINT)) AS stragglers,
           max(committed_ns) FILTER (
               WHERE rank = greatest(1, CAST(ceil(groups / 10.0) AS BIGINT)) + 1) AS bulk_ns
    FROM commits GROUP BY run_id, step_span_id
),
windows AS (  -- the parts of the step the split measures, as [a, b) per part
    SELECT s.run_id, s.span_id, s.dialect, s.start_ns, s.end_ns, s.wait_start_ns, s.ready_ns,
           coalesce(b.bulk_ns, s.wait_start_ns) AS bulk_ns
    FROM steps s
    LEFT JOIN bulk b ON b.run_id = s.run_id AND b.step_span_id = s.span_id
),
snapshots AS (
    SELECT run_id, start_ns, coalesce(end_ns, 9223372036854775807) AS end_ns
    FROM checkpoint_windows
),
syncs AS (
    SELECT run_id, start_ns, coalesce(end_ns, 9223372036854775807) AS end_ns
    FROM all_spans WHERE name = 'rl.weight_sync'
),
collisions AS (  -- where a snapshot and a weight sync overlap: counted as parked, not refit
    SELECT n.run_id, greatest(n.start_ns, y.start_ns) AS start_ns,
           least(n.end_ns, y.end_ns) AS end_ns
    FROM snapshots n
    JOIN syncs y ON y.run_id = n.run_id AND y.start_ns < n.end_ns AND y.end_ns > n.start_ns
),
crossings AS (  -- seconds of snapshots, syncs and both in the two parts of each 'rl' wait
    SELECT w.run_id, w.span_id,
           sum(greatest(0, least(x.end_ns, w.bulk_ns) - greatest(x.start_ns, w.wait_start_ns)))
               FILTER (WHERE x.what = 'snapshot') / 1e9 AS snapshot_before_bulk_s,
           sum(greatest(0, least(x.end_ns, w.ready_ns) - greatest(x.start_ns, w.bulk_ns)))
               FILTER (WHERE x.what = 'snapshot') / 1e9 AS snapshot_after_bulk_s,
           sum(greatest(0, least(x.end_ns, w.bulk_ns) - greatest(x.start_ns, w.wait_start_ns)))
               FILTER (WHERE x.what = 'sync') / 1e9
           - coalesce(sum(greatest(0, least(x.end_ns, w.bulk_ns)
                                      - greatest(x.start_ns, w.wait_start_ns)))
                          FILTER (WHERE x.what = 'both') / 1e9, 0) AS sync_before_bulk_s,
           sum(greatest(0, least(x.end_ns, w.ready_ns) - greatest(x.start_ns, w.bulk_ns)))
               FILTER (WHERE x.what = 'sync') / 1e9
           - coalesce(sum(greatest(0, least(x.end_ns, w.ready_ns)
                                      - greatest(x.start_ns, w.bulk_ns)))
                          FILTER (WHERE x.what = 'both') / 1e9, 0) AS sync_after_bulk_s
    FROM windows w
    JOIN (SELECT *, 'snapshot' AS what FROM snapshots UNION ALL
          SELECT *, 'sync' AS what FROM syncs UNION ALL
          SELECT *, 'both' AS what FROM collisions) x
        ON x.run_id = w.run_id AND x.start_ns < w.ready_ns AND x.end_ns > w.wait_start_ns
    WHERE w.dialect = 'rl'
    GROUP BY w.run_id, w.span_id
),
generation AS (  -- every interval in which a rollout was generating
    SELECT run_id, start_ns, coalesce(end_ns, 9223372036854775807) AS end_ns
    FROM rollout_attempts
    UNION ALL
    SELECT run_id, start_ns, coalesce(end_ns, 9223372036854775807)
    FROM all_spans
    WHERE name LIKE 'rl.%' AND (name LIKE 'rl.%.collect_rollouts' OR name LIKE 'rl.%.generation'
                                OR name = 'rl.sc.generate_and_push')
),
ordered AS (
    SELECT *, max(end_ns) OVER (PARTITION BY run_id ORDER BY start_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reached_ns
    FROM generation
),
numbered AS (  -- an interval that starts after every earlier one ended opens a busy stretch
    SELECT *, sum(CASE WHEN reached_ns IS NULL OR start_ns > reached_ns THEN 1 ELSE 0 END)
                  OVER (PARTITION BY run_id ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING)
                  AS stretch
    FROM ordered
),
busy AS (
    SELECT run_id, stretch, min(start_ns) AS start_ns, max(end_ns) AS end_ns
    FROM numbered GROUP BY run_id, stretch
),
covered AS (
    SELECT w.run_id, w.span_id,
           sum(least(b.end_ns, w.end_ns) - greatest(b.start_ns, w.start_ns)) / 1e9 AS busy_s
    FROM windows w
    JOIN busy b ON b.run_id = w.run_id AND b.start_ns < w.end_ns AND b.end_ns > w.start_ns
    GROUP BY w.run_id, w.span_id
),
generating_runs AS (SELECT DISTINCT run_id FROM generation),
split AS (
    SELECT s.*, b.groups, b.stragglers, w.bulk_ns,
           (s.ready_ns - s.wait_start_ns) / 1e9 AS wait_s,
           CASE WHEN s.dialect = 'rl'
                THEN greatest(0, (w.bulk_ns - s.wait_start_ns) / 1e9
                                 - coalesce(o.snapshot_before_bulk_s, 0)
                                 - coalesce(o.sync_before_bulk_s, 0))
                ELSE coalesce(s.buffer_starvation_s, s.collect_rollouts_s, 0) END
               AS generating_s,
           CASE WHEN s.dialect = 'rl'
                THEN greatest(0, (s.ready_ns - w.bulk_ns) / 1e9
                                 - coalesce(o.snapshot_after_bulk_s, 0)
                                 - coalesce(o.sync_after_bulk_s, 0)) END AS straggler_s,
           CASE WHEN s.dialect = 'rl'
                THEN coalesce(o.snapshot_before_bulk_s, 0) + coalesce(o.snapshot_after_bulk_s, 0)
                END AS parked_s,
           CASE WHEN s.dialect = 'rl'
                THEN coalesce(o.sync_before_bulk_s, 0) + coalesce(o.sync_after_bulk_s, 0)
                ELSE coalesce(s.refit_s, 0) END AS split_refit_s,
           CASE WHEN s.dialect = 'rl'
                THEN (s.end_ns - s.ready_ns) / 1e9
                ELSE coalesce(s.rewards_s, 0) + coalesce(s.logprobs_s, 0)
                     + coalesce(s.advantages_s, 0) + coalesce(s.data_processing_s, 0)
                     + coalesce(s.policy_update_s, 0) END AS train_s,
           coalesce(s.checkpoint_s, 0) AS split_checkpoint_s,
           CASE WHEN g.run_id IS NOT NULL
                THEN greatest(0, s.duration_s - coalesce(c.busy_s, 0)) END
               AS generation_bubble_s
    FROM steps s
    JOIN windows w ON w.run_id = s.run_id AND w.span_id = s.span_id
    LEFT JOIN bulk b ON b.run_id = s.run_id AND b.step_span_id = s.span_id
    LEFT JOIN crossings o ON o.run_id = s.run_id AND o.span_id = s.span_id
    LEFT JOIN covered c ON c.run_id = s.run_id AND c.span_id = s.span_id
    LEFT JOIN generating_runs g ON g.run_id = s.run_id
)
SELECT
    run_id, dialect, algorithm, step, start_ns, end_ns, duration_s,
    wait_start_ns, ready_ns, wait_s, coalesce(groups, 0) AS groups,
    coalesce(stragglers, 0) AS stragglers, bulk_ns,
    generating_s, straggler_s, parked_s, split_refit_s AS refit_s, train_s,
    split_checkpoint_s AS checkpoint_s,
    duration_s - generating_s - coalesce(straggler_s, 0) - coalesce(parked_s, 0)
        - split_refit_s - train_s - split_checkpoint_s AS other_s,
    generation_bubble_s,
    productive_s, overhead_s, idle_s, wasted_s, buffer_starvation_s, refit_bubble_s,
    starvation_waits,
    weight_version, batch_weight_version, policy_lag, prompt_groups,
    trace_id, span_id
FROM split
