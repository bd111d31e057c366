-- gym_attempts: the Gym rows of rollout_attempts (see there), in its columns: one row per Gym
-- rollout attempt (gym.rollout) that names no RL prompt. A Gym rollout carrying RL's prompt
-- index (nemo.rl.prompt.idx, which an RL-aware deployment stamps) is a row of an RL try, and
-- RL's rows list those tries (the join rule, docs/gym-telemetry.md). Its own view, so that
-- rollout_attempts stays a plain union whose readers pay only for the columns they read.
CREATE OR REPLACE VIEW gym_attempts AS
WITH gym AS (
    SELECT r.*, coalesce(r.rollout_id, 'trace-' || left(r.trace_id, 12)) AS key
    FROM all_spans r
    WHERE r.name = 'gym.rollout' AND r.prompt_idx IS NULL
),
gym_rows AS (
    SELECT g.*,
           CASE WHEN regexp_matches(g.key, '-a[0-9]+$')
                THEN regexp_extract(g.key, '^(.+)-a[0-9]+$', 1) ELSE g.key END AS base,
           coalesce(TRY_CAST(regexp_extract(g.key, '-a([0-9]+)$', 1) AS INTEGER), 0)
               AS gym_attempt,
           -- read off the joined reply, so that a filter on the status runs on the rollouts
           -- after the join rather than on every SERVER span before it
           CASE WHEN q.span_id = g.parent_span_id
                THEN TRY_CAST(coalesce(q.attributes->>'http.response.status_code',
                                       q.attributes->>'http.status_code') AS INTEGER)
           END AS http_status
    FROM gym g
    -- each one's /run: the agent's SERVER span, its parent in the same process
    LEFT JOIN (SELECT run_id, trace_id, span_id, attributes FROM all_spans
               WHERE kind = 'SERVER') q
        ON q.run_id = g.run_id AND q.trace_id = g.trace_id AND q.span_id = g.parent_span_id
)
SELECT
    g.run_id,
    'gym' AS dialect,
    g.base AS rollout_id,
    g.prompt_idx,
    g.gym_attempt AS attempt,
    g.rollout_id AS capture_key,
    CAST(NULL AS VARCHAR) AS group_id,
    g.start_ns,
    g.end_ns,
    CASE WHEN g.end_ns IS NULL THEN 'open'
         WHEN (g.attributes->>'nemo.gym.rollout.outcome') IS NOT NULL
             THEN g.attributes->>'nemo.gym.rollout.outcome'
         WHEN g.status_code = 'ERROR' OR g.http_status >= 400 THEN 'failed'
         ELSE 'finished' END AS outcome,
    CASE WHEN g.http_status >= 500 OR g.http_status IN (408, 429) THEN 'infra'
         WHEN g.http_status >= 400 THEN 'data' END AS failure_class,
    coalesce(g.status_message, CASE WHEN g.http_status >= 400
                                    THEN 'HTTP ' || g.http_status END) AS failure_reason,
    CASE WHEN g.http_status >= 400 THEN g.http_status END AS failure_http_status,
    CAST(NULL AS VARCHAR) AS failure_detail,
    CAST(NULL AS BIGINT) AS weight_version,
    (g.end_ns - g.start_ns) / 1e9 AS duration_s,
    g.trace_id,
    g.span_id,
    g.is_open
FROM gym_rows g
