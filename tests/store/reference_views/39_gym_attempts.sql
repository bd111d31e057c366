-- gym_attempts: the Gym rows of rollout_attempts (see there), in its columns: one row per Gym
-- rollout attempt (gym.rollout) that names no RL prompt. A Gym rollout carrying RL's prompt
-- index (nemo.rl.prompt.idx, which an RL-aware deployment stamps) is a row of an RL try, and
-- RL's rows list those tries (the join rule, docs/gym-telemetry.md). Its own view, so that
-- rollout_attempts stays a plain union whose readers pay only for the columns they read.
CREATE OR REPLACE VIEW gym_attempts AS
WITH -- found first and kept: a run of RL tries, with a Gym rollout per row, has none of them
gym AS MATERIALIZED (
    SELECT r.*, coalesce(r.rollout_id, 'trace-' || left(r.trace_id, 12)) AS key
    FROM all_spans r
    WHERE r.name = 'gym.rollout' AND r.prompt_idx IS NULL
),
-- each one's /run: the agent's SERVER span, its parent in the same process
replies AS MATERIALIZED (
    SELECT p.run_id, p.trace_id, p.span_id,
           TRY_CAST(coalesce(p.attributes->>'http.response.status_code',
                             p.attributes->>'http.status_code') AS INTEGER) AS http_status
    FROM all_spans p
    WHERE p.kind = 'SERVER' AND p.span_id IN (SELECT parent_span_id FROM gym)
),
gym_rows AS (
    SELECT g.*,
           CASE WHEN regexp_matches(g.key, '-a[0-9]+$')
                THEN regexp_extract(g.key, '^(.+)-a[0-9]+$', 1) ELSE g.key END AS base,
           coalesce(TRY_CAST(regexp_extract(g.key, '-a([0-9]+)$', 1) AS INTEGER), 0)
               AS gym_attempt,
           q.http_status AS reply_status
    FROM gym g
    LEFT JOIN replies q
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
         WHEN g.status_code = 'ERROR' OR g.reply_status >= 400 THEN 'failed'
         ELSE 'finished' END AS outcome,
    CASE WHEN g.reply_status >= 500 OR g.reply_status IN (408, 429) THEN 'infra'
         WHEN g.reply_status >= 400 THEN 'data' END AS failure_class,
    coalesce(g.status_message, CASE WHEN g.reply_status >= 400
                                    THEN 'HTTP ' || g.reply_status END) AS failure_reason,
    CASE WHEN g.reply_status >= 400 THEN g.reply_status END AS failure_http_status,
    CAST(NULL AS VARCHAR) AS failure_detail,
    CAST(NULL AS BIGINT) AS weight_version,
    (g.end_ns - g.start_ns) / 1e9 AS duration_s,
    g.trace_id,
    g.span_id,
    g.is_open
FROM gym_rows g
