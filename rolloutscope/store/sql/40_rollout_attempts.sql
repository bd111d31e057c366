-- rollout_attempts: one row per try at producing a rollout, in either dialect:
-- - dialect 'rl': an RL try of a prompt group (rl.rollout.attempt; one iteration of
--   generate_and_push, DOMAIN.md §4.1, §7.4). attempt is the 0-based try; group_id the replay
--   buffer group reserved for it. outcome: committed | failed | cancelled, or 'open' while the
--   try runs. failure_class is infra | data (DOMAIN.md §4.3), failure_reason the exception class.
-- - dialect 'gym': a Gym rollout attempt (gym_rollouts: one agent /run) that no RL try of the
--   run accounts for, which is every one in a run seen only from Gym. attempt is Gym's attempt
--   (the N of capture key rid-aN), capture_key the id Gym stamped; outcome finished | failed |
--   open (nothing commits a Gym rollout). A Gym rollout carrying RL's prompt_idx and try is the
--   row of that RL try and is not listed again (the join rule, docs/gym-telemetry.md).
CREATE OR REPLACE VIEW rollout_attempts AS
WITH rl AS (
    SELECT * FROM all_spans WHERE name = 'rl.rollout.attempt'
)
SELECT
    run_id,
    'rl' AS dialect,
    rollout_id,
    prompt_idx,
    attempt,
    CAST(NULL AS VARCHAR) AS capture_key,
    attributes->>'nemo.rl.group.id' AS group_id,
    start_ns,
    end_ns,
    CASE WHEN end_ns IS NULL THEN 'open'
         ELSE coalesce(attributes->>'nemo.rl.rollout.outcome',
                       CASE WHEN status_code = 'ERROR' THEN 'failed' ELSE 'committed' END)
    END AS outcome,
    attributes->>'nemo.rl.failure.class' AS failure_class,
    attributes->>'nemo.rl.failure.reason' AS failure_reason,
    TRY_CAST(attributes->>'nemo.rl.failure.http_status' AS INTEGER) AS failure_http_status,
    attributes->>'nemo.rl.failure.detail' AS failure_detail,
    TRY_CAST(attributes->>'nemo.rl.weight_version' AS BIGINT) AS weight_version,
    (end_ns - start_ns) / 1e9 AS duration_s,
    trace_id,
    span_id,
    is_open
FROM rl
UNION ALL
SELECT
    g.run_id,
    'gym' AS dialect,
    g.rollout_id,
    g.prompt_idx,
    g.gym_attempt AS attempt,
    g.capture_key,
    CAST(NULL AS VARCHAR) AS group_id,
    g.start_ns,
    g.end_ns,
    g.outcome,
    CASE WHEN g.http_status >= 500 OR g.http_status IN (408, 429) THEN 'infra'
         WHEN g.http_status >= 400 THEN 'data' END AS failure_class,
    g.failure_reason,
    CASE WHEN g.http_status >= 400 THEN g.http_status END AS failure_http_status,
    CAST(NULL AS VARCHAR) AS failure_detail,
    CAST(NULL AS BIGINT) AS weight_version,
    g.duration_s,
    g.trace_id,
    g.span_id,
    g.is_open
FROM gym_rollouts g
WHERE NOT EXISTS (
    SELECT 1 FROM rl
    WHERE rl.run_id = g.run_id AND rl.prompt_idx = g.prompt_idx
      AND rl.attempt IS NOT DISTINCT FROM g.rl_attempt)
