-- gym_rollouts: one row per Gym rollout attempt, that is one agent /run (released Gym's
-- gym.rollout span, nemo_gym/telemetry). capture_key is the rollout id Gym stamps
-- (nemo.gym.rollout.id): rid, or rid-aN for attempt N that a checkpoint restore (or the caller's
-- _ng_attempt_index) started; rollout_id and gym_attempt are its parts (a base id may not end in
-- -aN, so the split is unambiguous). Without Gym's observability switch there is no id: the
-- rollout is then named after its trace (each rollout is its own trace under the per_rollout
-- span groups). task_index / repeat_index: nemo.gym.task.id / nemo.gym.repeat.index where Gym
-- sets them, else the default id's "<task>-<repeat>" form.
-- Join keys to RL's rows (rollout_attempts, dialect rl), where the span carries them:
-- prompt_idx (nemo.rl.prompt.idx) and rl_attempt (nemo.rl.rollout.attempt); released Gym
-- carries neither, see docs/gym-telemetry.md.
-- outcome: open while it runs; nemo.gym.rollout.outcome where Gym records one; failed when the
-- span failed or its /run answered >= 400; else finished (Gym 0.7.0 records no reward or
-- verdict: reward is rl.reward where a caller sets it). Model time and tokens are summed over
-- the rollout's model_calls (by capture key); verify_s is its gym.verify span; agent_s its
-- gym.agent.responses span (which carries no rollout id in Gym 0.7.0: its key is read from the
-- /ng-rollout/<key>/ path of the request it served, its parent in the same process).
-- gym_rollouts_of(run, floor_ns): the rows of run that start at or after floor_ns (NULL: every
-- run, the whole run), computed from there on. Their model calls, verifies and agent spans
-- start inside them, but on other processes' clocks: they are read from a minute before the
-- floor. At 10M spans the latest 20,000 rollouts read in 1.2 s instead of 15.7 s.
CREATE OR REPLACE MACRO gym_rollouts_of(run, floor_ns) AS TABLE
WITH rollouts AS (
    SELECT r.*,
           coalesce(r.rollout_id, 'trace-' || left(r.trace_id, 12)) AS key
    FROM all_spans r
    WHERE r.name = 'gym.rollout'
      AND (run IS NULL OR r.run_id = run) AND (floor_ns IS NULL OR r.start_ns >= floor_ns)
),
run_replies AS (  -- the agent's own /run SERVER span: the parent, in the same process, which
    -- starts before it (looked up from a minute before the floor, like the spans below)
    SELECT s.run_id, s.trace_id, s.span_id,
           s.http_status
    FROM all_spans s
    WHERE s.kind = 'SERVER'
      AND (run IS NULL OR s.run_id = run)
      AND (floor_ns IS NULL OR s.start_ns >= floor_ns - 60000000000)
      AND s.span_id IN (SELECT parent_span_id FROM rollouts)
),
calls AS (
    SELECT run_id, capture_key, count(*) AS model_calls, sum(duration_s) AS model_s,
           count(*) FILTER (WHERE outcome = 'error') AS model_errors,
           sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens
    FROM model_calls_of(run, floor_ns - 60000000000)
    WHERE capture_key IS NOT NULL
    GROUP BY run_id, capture_key
),
verifies AS (
    SELECT run_id, rollout_id AS capture_key, sum((end_ns - start_ns) / 1e9) AS verify_s
    FROM all_spans
    WHERE name = 'gym.verify' AND rollout_id IS NOT NULL
      AND (run IS NULL OR run_id = run)
      AND (floor_ns IS NULL OR start_ns >= floor_ns - 60000000000)
    GROUP BY run_id, rollout_id
),
agent AS (
    SELECT a.run_id,
           coalesce(a.rollout_id,
                    nullif(regexp_extract(coalesce(p.attributes->>'http.target',
                                                   p.attributes->>'url.path'),
                                          '/ng-rollout/([^/]+)/', 1), '')) AS capture_key,
           (a.end_ns - a.start_ns) / 1e9 AS agent_s
    FROM all_spans a
    LEFT JOIN all_spans p  -- its parent starts before it
        ON p.run_id = a.run_id AND p.trace_id = a.trace_id AND p.span_id = a.parent_span_id
       AND (floor_ns IS NULL OR p.start_ns >= floor_ns - 120000000000)
    WHERE a.name = 'gym.agent.responses'
      AND (run IS NULL OR a.run_id = run)
      AND (floor_ns IS NULL OR a.start_ns >= floor_ns - 60000000000)
),
agents AS (
    SELECT run_id, capture_key, sum(agent_s) AS agent_s
    FROM agent WHERE capture_key IS NOT NULL
    GROUP BY run_id, capture_key
),
split AS (
    SELECT r.*,
           CASE WHEN regexp_matches(r.key, '-a[0-9]+$')
                THEN regexp_extract(r.key, '^(.+)-a[0-9]+$', 1) ELSE r.key END AS base,
           coalesce(TRY_CAST(regexp_extract(r.key, '-a([0-9]+)$', 1) AS INTEGER), 0)
               AS gym_attempt
    FROM rollouts r
)
SELECT
    r.run_id,
    r.rollout_id AS capture_key,
    r.base AS rollout_id,
    r.gym_attempt,
    coalesce(TRY_CAST(r.attributes->>'nemo.gym.task.id' AS BIGINT),
             TRY_CAST(regexp_extract(r.base, '^([0-9]+)-[0-9]+$', 1) AS BIGINT)) AS task_index,
    coalesce(TRY_CAST(r.attributes->>'nemo.gym.repeat.index' AS BIGINT),
             TRY_CAST(regexp_extract(r.base, '^[0-9]+-([0-9]+)$', 1) AS BIGINT))
        AS repeat_index,
    r.prompt_idx,
    TRY_CAST(r.attributes->>'nemo.rl.rollout.attempt' AS INTEGER) AS rl_attempt,
    coalesce(r.attributes->>'nemo.gym.server.name', r.resource->>'nemo.gym.server.name')
        AS server_name,
    r.service,
    r.start_ns,
    r.end_ns,
    (r.end_ns - r.start_ns) / 1e9 AS duration_s,
    CASE WHEN r.end_ns IS NULL THEN 'open'
         WHEN (r.attributes->>'nemo.gym.rollout.outcome') IS NOT NULL
             THEN r.attributes->>'nemo.gym.rollout.outcome'
         WHEN r.status_code = 'ERROR' OR q.http_status >= 400 THEN 'failed'
         ELSE 'finished' END AS outcome,
    q.http_status,
    coalesce(r.status_message, CASE WHEN q.http_status >= 400
                                    THEN 'HTTP ' || q.http_status END) AS failure_reason,
    TRY_CAST(r.attributes->>'rl.reward' AS DOUBLE) AS reward,
    coalesce(c.model_calls, 0) AS model_calls,
    c.model_s,
    coalesce(c.model_errors, 0) AS model_errors,
    c.input_tokens,
    c.output_tokens,
    v.verify_s,
    g.agent_s,
    r.trace_id,
    r.span_id,
    r.is_open
FROM split r
LEFT JOIN run_replies q
    ON q.run_id = r.run_id AND q.trace_id = r.trace_id AND q.span_id = r.parent_span_id
LEFT JOIN calls c ON c.run_id = r.run_id AND c.capture_key = r.rollout_id
LEFT JOIN verifies v ON v.run_id = r.run_id AND v.capture_key = r.rollout_id
LEFT JOIN agents g ON g.run_id = r.run_id AND g.capture_key = r.rollout_id;

CREATE OR REPLACE VIEW gym_rollouts AS
SELECT * FROM gym_rollouts_of(NULL, NULL)
