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
           q.http_status AS error_status
    FROM gym g
    -- each one's /run (the agent's SERVER span, its parent in the same process) where it
    -- answered an error: only a status >= 400 changes a row, and joining those few replies
    -- costs next to nothing, where joining every SERVER span cost every reader of
    -- rollout_attempts (a count of them included) a hash join of all of them
    LEFT JOIN (SELECT run_id, trace_id, span_id, http_status FROM all_spans
               WHERE kind = 'SERVER' AND http_status >= 400) q
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
         WHEN g.status_code = 'ERROR' OR g.error_status >= 400 THEN 'failed'
         ELSE 'finished' END AS outcome,
    CASE WHEN g.error_status >= 500 OR g.error_status IN (408, 429) THEN 'infra'
         WHEN g.error_status >= 400 THEN 'data' END AS failure_class,
    coalesce(g.status_message, 'HTTP ' || g.error_status) AS failure_reason,
    g.error_status AS failure_http_status,
    CAST(NULL AS VARCHAR) AS failure_detail,
    CAST(NULL AS BIGINT) AS weight_version,
    (g.end_ns - g.start_ns) / 1e9 AS duration_s,
    g.trace_id,
    g.span_id,
    g.is_open
FROM gym_rows g
