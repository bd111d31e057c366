-- stall (P3 in docs/domain/incidents.md; NVIDIA-NeMo/RL #3590): the watchdog's definition.
-- Progress is the pair (committed prompt groups, completed train steps); a stall is a stretch
-- longer than stall_timeout_s with no progress while work remains (train steps < max_num_steps).
-- Nothing in flight is still a stall (the hung weight sync); an idle controller with no work left
-- is not.
-- The stretch runs from the last progress to the next (end_ns NULL if the run ended stalled);
-- inflight is what was in flight when the watchdog's stall line became due.
-- A run recorded without spans for one kind of progress (an imported logger's metrics) progresses
-- when the watchdog's counters rollout/committed_total and rollout/train_steps move; its in-flight
-- count is the stall line's, else the rollout/inflight sample due at the stall, and with no record
-- of commits at all (a controller log alone) its committed count is the stall line's.
CREATE OR REPLACE VIEW stall AS
WITH attempt_runs AS (  -- the runs with rollout tries: one row each, so each test below is
    -- a lookup in a row per run instead of a hash join with every try
    SELECT DISTINCT run_id FROM rollout_attempts
),
counter_moves AS (
    SELECT run_id, name, ts_ns,
           CAST(value - coalesce(lag(value) OVER (PARTITION BY run_id, name ORDER BY ts_ns), 0)
                AS BIGINT) AS delta
    FROM metrics
    WHERE name IN ('rollout/committed_total', 'rollout/train_steps') AND value IS NOT NULL
),
progress AS (
    SELECT run_id, end_ns AS t, 1 AS committed, 0 AS steps FROM rollout_attempts
    WHERE outcome = 'committed'
    UNION ALL
    SELECT run_id, end_ns, 0, 1 FROM all_spans
    WHERE name = 'rl.train_step' AND end_ns IS NOT NULL
    UNION ALL
    SELECT m.run_id, m.ts_ns, m.delta, 0 FROM counter_moves m
    WHERE m.name = 'rollout/committed_total' AND m.delta > 0
      AND NOT EXISTS (SELECT 1 FROM attempt_runs a WHERE a.run_id = m.run_id)
    UNION ALL
    SELECT m.run_id, m.ts_ns, 0, m.delta FROM counter_moves m
    WHERE m.name = 'rollout/train_steps' AND m.delta > 0
      AND NOT EXISTS (SELECT 1 FROM all_spans s
                      WHERE s.run_id = m.run_id AND s.name = 'rl.train_step')
    UNION ALL
    SELECT run_id, start_ns, 0, 0 FROM run_thresholds WHERE start_ns IS NOT NULL
),
-- Progress instants (epoch ns) in buckets one stall timeout wide: two instants in one bucket are
-- less than a timeout apart, so a stretch long enough to be a stall runs from the last instant of
-- a bucket to the first of the next bucket that has any. Counting per bucket turns a run's
-- millions of commits into a row per bucket before anything is sorted.
buckets AS (
    SELECT p.run_id,
           p.t // greatest(CAST(th.stall_timeout_s * 1e9 AS BIGINT), 1) AS bucket,
           min(p.t) AS first_t,
           max(p.t) AS last_t,
           sum(p.committed) AS committed,
           sum(p.steps) AS steps
    FROM progress p
    JOIN run_thresholds th ON th.run_id = p.run_id
    GROUP BY p.run_id, bucket
),
cumulative AS (
    SELECT run_id, last_t AS t,
           sum(committed) OVER w AS committed,
           sum(steps) OVER w AS steps,
           lead(first_t) OVER (PARTITION BY run_id ORDER BY bucket) AS next_t
    FROM buckets
    WINDOW w AS (PARTITION BY run_id ORDER BY bucket ROWS UNBOUNDED PRECEDING)
),
gaps AS (
    SELECT c.run_id, c.t AS idle_since_ns, c.next_t, c.committed, c.steps,
           coalesce(c.next_t, th.end_ns) AS until_ns, th.stall_timeout_s, th.max_num_steps,
           th.origin_ns AS origin_ns
    FROM cumulative c
    JOIN run_thresholds th ON th.run_id = c.run_id
),
stalls AS (
    SELECT g.*, g.idle_since_ns + CAST(g.stall_timeout_s * 1e9 AS BIGINT) AS due_ns
    FROM gaps g
    WHERE (g.until_ns - g.idle_since_ns) / 1e9 > g.stall_timeout_s
      AND (g.max_num_steps IS NULL OR g.steps < g.max_num_steps)
)
SELECT
    s.run_id,
    'p3-' || substr(md5(s.run_id || s.idle_since_ns), 1, 10) AS incident_id,
    'stall' AS kind,
    'critical' AS severity,
    s.idle_since_ns AS start_ns,
    s.next_t AS end_ns,
    'controller' AS subject,
    format('No rollout committed and no train step completed for {:.0f} s{} ({} rollouts in '
           'flight, {} groups committed, step {}{}, stall_timeout_s={:g}).',
           (s.until_ns - s.idle_since_ns) / 1e9,
           CASE WHEN s.next_t IS NULL THEN ' until the end of the run'
                ELSE format(' (from {:.0f} s to {:.0f} s)',
                            (s.idle_since_ns - s.origin_ns) / 1e9,
                            (s.next_t - s.origin_ns) / 1e9) END,
           CASE WHEN EXISTS (SELECT 1 FROM attempt_runs a WHERE a.run_id = s.run_id)
                THEN (SELECT count(*) FROM rollout_attempts a
                      WHERE a.run_id = s.run_id AND a.start_ns <= s.due_ns
                        AND (a.end_ns IS NULL OR a.end_ns > s.due_ns))
                ELSE coalesce(
                    (SELECT arg_min(TRY_CAST(e.attributes->>'nemo.rl.stall.inflight' AS BIGINT),
                                    e.ts_ns)
                     FROM span_events e
                     WHERE e.run_id = s.run_id AND e.name = 'rl.stall'
                       AND e.ts_ns BETWEEN s.idle_since_ns AND s.until_ns),
                    (SELECT CAST(arg_max(m.value, m.ts_ns) AS BIGINT) FROM metrics m
                     WHERE m.run_id = s.run_id AND m.name = 'rollout/inflight'
                       AND m.ts_ns BETWEEN s.idle_since_ns AND s.due_ns),
                    0) END,
           CASE WHEN s.committed > 0 THEN s.committed
                ELSE coalesce(
                    (SELECT arg_min(TRY_CAST(e.attributes->>'nemo.rl.stall.committed' AS BIGINT),
                                    e.ts_ns)
                     FROM span_events e
                     WHERE e.run_id = s.run_id AND e.name = 'rl.stall'
                       AND e.ts_ns BETWEEN s.idle_since_ns AND s.until_ns), 0) END,
           s.steps,
           CASE WHEN s.max_num_steps IS NULL THEN '' ELSE '/' || s.max_num_steps END,
           s.stall_timeout_s) AS summary,
    coalesce((SELECT list(e.span_id ORDER BY e.ts_ns) FROM span_events e
              WHERE e.run_id = s.run_id AND e.name = 'rl.stall'
                AND e.ts_ns BETWEEN s.idle_since_ns AND s.until_ns), []) AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM stalls s
