-- step_stragglers: the groups each train step waited for last, and what held them up
-- (docs/train-steps.md#stragglers). A step's stragglers are the last tenth, at least one, of the
-- groups committed in its wait (step_ledger); a group with no committed try and a try still
-- running at the run's end is listed under the step after the last (step_ledger's last step
-- + 1, committed_ns NULL): what the next step would be waiting for.
-- For each group (rollout_id: an RL prompt group, or a Gym rollout), from the model views:
--   tries, failed_tries, failure_reasons  rollout_attempts: a try after the first is a
--                                         re-dispatch; the failed tries' failure_reason
--   timeouts                              deadlines of the group that fired
--   parked_s, snapshots                   parked_intervals of its rows, and the snapshots that
--                                         parked them
--   completed_unacked                     completions of its rows never acknowledged
--   model_calls, model_errors             the Gym model-call spans of its rows (Gym rollout ids
--                                         <rollout_id>-<row>), and those that failed
--   retries, retry_statuses               gym.model.retry events on its rows' model calls
--   failed_shards                         generation shards whose router answered its calls
--                                         with an error (rl.router.request, by
--                                         nemo.gym.model_call.id)
--   duration_s, step_median_s             the committed try's duration, and the median of
--                                         the step's groups (a slow group: far above it)
-- step_span_id is the step's (step_ledger's span_id; NULL for the groups after the last step).
-- why says it in words, the likeliest first: re-dispatched, timed out, parked by a
-- snapshot, retried model calls, failing shards, slow, still running; a group with none of
-- these was a try of usual length that started late. (rolloutscope.store.ledger adds the
-- incidents whose subject names the group, from the run's incidents as the store keeps them:
-- the incidents union read here would cost more than every other part of the view.)
CREATE OR REPLACE VIEW step_stragglers AS
-- (the steps and their groups as step_ledger counts them, read from train_steps: the ledger's
-- other parts, the generation bubble above all, are not needed here)
WITH steps AS (
    SELECT t.run_id, t.step, t.span_id, t.ready_ns,
           lag(t.ready_ns) OVER (PARTITION BY t.run_id ORDER BY t.start_ns, t.step)
               AS previous_ready_ns
    FROM train_steps t
),
committed AS (
    SELECT s.run_id, s.step, s.span_id AS step_span_id, a.rollout_id, a.prompt_idx, a.dialect,
           a.attempt,
           a.end_ns AS committed_ns, a.duration_s,
           row_number() OVER (PARTITION BY s.run_id, s.span_id ORDER BY a.end_ns DESC,
                                                                     a.rollout_id DESC) AS rank,
           greatest(1, CAST(ceil(count(*) OVER (PARTITION BY s.run_id, s.span_id) / 10.0)
                            AS BIGINT)) AS stragglers,
           median(a.duration_s) OVER (PARTITION BY s.run_id, s.span_id) AS step_median_s
    FROM steps s
    JOIN rollout_attempts a ON a.run_id = s.run_id AND a.outcome IN ('committed', 'finished')
                           AND a.end_ns > coalesce(s.previous_ready_ns, -1)
                           AND a.end_ns <= s.ready_ns
),
last_steps AS (SELECT run_id, max(step) AS step FROM steps GROUP BY run_id),
pending AS (  -- groups with a try still running and none committed
    SELECT a.run_id, coalesce(l.step, 0) + 1 AS step, CAST(NULL AS VARCHAR) AS step_span_id,
           a.rollout_id,
           any_value(a.prompt_idx) AS prompt_idx, any_value(a.dialect) AS dialect,
           max(a.attempt) AS attempt, CAST(NULL AS BIGINT) AS committed_ns,
           CAST(NULL AS DOUBLE) AS duration_s, 1 AS rank, 1 AS stragglers,
           CAST(NULL AS DOUBLE) AS step_median_s
    FROM rollout_attempts a
    LEFT JOIN last_steps l ON l.run_id = a.run_id
    GROUP BY a.run_id, l.step, a.rollout_id
    HAVING bool_or(a.outcome = 'open') AND NOT bool_or(a.outcome IN ('committed', 'finished'))
),
stragglers AS (
    SELECT * FROM committed WHERE rank <= stragglers
    UNION ALL BY NAME
    SELECT * FROM pending
),
tries AS (
    SELECT a.run_id, a.rollout_id, count(*) AS tries,
           count(*) FILTER (WHERE a.outcome IN ('failed', 'cancelled')) AS failed_tries,
           string_agg(DISTINCT a.failure_reason, ', ' ORDER BY a.failure_reason)
               AS failure_reasons
    FROM rollout_attempts a SEMI JOIN stragglers g ON g.run_id = a.run_id
                                                   AND g.rollout_id = a.rollout_id
    GROUP BY a.run_id, a.rollout_id
),
timeouts AS (
    SELECT d.run_id, d.rollout_id, count(*) AS timeouts
    FROM deadlines d SEMI JOIN stragglers g ON g.run_id = d.run_id AND g.rollout_id = d.rollout_id
    WHERE d.outcome = 'fired'
    GROUP BY d.run_id, d.rollout_id
),
-- Each source's rows by group: a Gym rollout id is <group>-<row>, so a row is looked up under
-- its own id and under that id less its last '-<n>' (unnest: an equality join, where a prefix
-- test would compare every straggler with every row)
parked AS (
    SELECT g.run_id, g.rollout_id, sum(p.duration_s) AS parked_s,
           string_agg(DISTINCT p.checkpoint_id, ', ' ORDER BY p.checkpoint_id) AS snapshots
    FROM (SELECT *, unnest([rollout_id, regexp_extract(rollout_id, '^(.+)-[0-9]+$', 1)])
                        AS group_key
          FROM parked_intervals) p
    JOIN stragglers g ON g.run_id = p.run_id AND g.rollout_id = p.group_key
    GROUP BY g.run_id, g.rollout_id
),
unacked AS (
    SELECT g.run_id, g.rollout_id, count(*) AS completed_unacked
    FROM (SELECT *, unnest([rollout_id, regexp_extract(rollout_id, '^(.+)-[0-9]+$', 1)])
                        AS group_key
          FROM completions WHERE ack_ns IS NULL) c
    JOIN stragglers g ON g.run_id = c.run_id AND g.rollout_id = c.group_key
    GROUP BY g.run_id, g.rollout_id
),
calls AS (  -- the Gym model-call spans of its rows (model_calls' own rows, without the HTTP
            -- tries the view joins to them)
    SELECT g.run_id, g.rollout_id, count(*) AS model_calls,
           count(*) FILTER (WHERE m.status_code = 'ERROR'
                            OR TRY_CAST(m.status AS INTEGER) >= 400) AS model_errors
    FROM (SELECT run_id, status_code, attributes->>'http.response.status_code' AS status,
                 unnest([rollout_id, regexp_extract(rollout_id, '^(.+)-[0-9]+$', 1)])
                     AS group_key
          FROM all_spans
          WHERE name IN ('gym.model.responses', 'gym.model.chat_completions',
                         'gym.model.messages')) m
    JOIN stragglers g ON g.run_id = m.run_id AND g.rollout_id = m.group_key
    GROUP BY g.run_id, g.rollout_id
),
retries AS (
    SELECT g.run_id, g.rollout_id, count(*) AS retries,
           string_agg(DISTINCT e.status, ', ') AS retry_statuses
    FROM (SELECT run_id, attributes->>'http.response.status_code' AS status,
                 unnest([rollout_id, regexp_extract(rollout_id, '^(.+)-[0-9]+$', 1)])
                     AS group_key
          FROM span_events WHERE name = 'gym.model.retry') e
    JOIN stragglers g ON g.run_id = e.run_id AND g.rollout_id = e.group_key
    GROUP BY g.run_id, g.rollout_id
),
shards AS (  -- a router request names its call (<gym rollout id>.<turn>...), not its rollout
    SELECT g.run_id, g.rollout_id,
           string_agg(DISTINCT CAST(r.shard_idx AS VARCHAR), ', ') AS failed_shards
    FROM (SELECT run_id, shard_idx,
                 unnest([split_part(attributes->>'nemo.gym.model_call.id', '.', 1),
                         regexp_extract(split_part(attributes->>'nemo.gym.model_call.id', '.', 1),
                                        '^(.+)-[0-9]+$', 1)]) AS group_key
          FROM all_spans WHERE name = 'rl.router.request' AND status_code = 'ERROR') r
    JOIN stragglers g ON g.run_id = r.run_id AND g.rollout_id = r.group_key
    GROUP BY g.run_id, g.rollout_id
),
described AS (
    SELECT g.run_id, g.step, g.step_span_id, g.rank, g.rollout_id, g.prompt_idx, g.dialect,
           g.attempt,
           g.committed_ns, g.duration_s, g.step_median_s,
           coalesce(t.tries, 0) AS tries, coalesce(t.failed_tries, 0) AS failed_tries,
           t.failure_reasons, coalesce(d.timeouts, 0) AS timeouts,
           coalesce(p.parked_s, 0) AS parked_s, p.snapshots,
           coalesce(u.completed_unacked, 0) AS completed_unacked,
           coalesce(c.model_calls, 0) AS model_calls, coalesce(c.model_errors, 0) AS model_errors,
           coalesce(r.retries, 0) AS retries, r.retry_statuses, s.failed_shards
    FROM stragglers g
    LEFT JOIN tries t ON t.run_id = g.run_id AND t.rollout_id = g.rollout_id
    LEFT JOIN timeouts d ON d.run_id = g.run_id AND d.rollout_id = g.rollout_id
    LEFT JOIN parked p ON p.run_id = g.run_id AND p.rollout_id = g.rollout_id
    LEFT JOIN unacked u ON u.run_id = g.run_id AND u.rollout_id = g.rollout_id
    LEFT JOIN calls c ON c.run_id = g.run_id AND c.rollout_id = g.rollout_id
    LEFT JOIN retries r ON r.run_id = g.run_id AND r.rollout_id = g.rollout_id
    LEFT JOIN shards s ON s.run_id = g.run_id AND s.rollout_id = g.rollout_id
)
SELECT *,
    coalesce(nullif(concat_ws('; ',
        CASE WHEN failed_tries > 0 THEN 're-dispatched: try ' || attempt || ' after '
             || failed_tries || ' failed' || coalesce(' (' || failure_reasons || ')', '') END,
        CASE WHEN timeouts > 0 THEN 'deadline fired ' || timeouts || 'x' END,
        CASE WHEN parked_s > 0 THEN 'parked ' || round(parked_s, 1) || ' s by snapshot '
             || snapshots END,
        CASE WHEN retries > 0 THEN retries || ' model call retries'
             || coalesce(' (HTTP ' || retry_statuses || ')', '') END,
        CASE WHEN failed_shards IS NOT NULL THEN 'generation failed on shard ' || failed_shards
             END,
        CASE WHEN model_errors > 0 THEN model_errors || ' model call(s) failed' END,
        CASE WHEN step_median_s > 0 AND duration_s > 1.5 * step_median_s
             THEN 'slow: ' || round(duration_s, 1) || ' s against a median of '
                  || round(step_median_s, 1) || ' s' END,
        CASE WHEN committed_ns IS NULL THEN 'still running at the end of the run' END
    ), ''), 'no hold-up recorded: a try of usual length that started late') AS why
FROM described
