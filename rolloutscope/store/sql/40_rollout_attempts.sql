-- rollout_attempts: one row per try at producing a rollout, in either dialect:
-- - dialect 'rl': an RL try of a prompt group (rl.rollout.attempt; one iteration of
--   generate_and_push, docs/domain/rollouts-and-deadlines.md#units). attempt is the 0-based try;
--   group_id the replay buffer group reserved for it. outcome: committed | failed | cancelled, or
--   'open' while the try runs. failure_class is infra | data
--   (docs/domain/rollouts-and-deadlines.md#failure-taxonomy), failure_reason the exception class.
-- - dialect 'gym': a Gym rollout attempt (one agent /run, gym.rollout) that names no RL prompt,
--   which is every one a released Gym sends. attempt is Gym's attempt
--   (the N of capture key rid-aN), capture_key the id Gym stamped; outcome finished | failed |
--   open (nothing commits a Gym rollout). A Gym rollout that carries RL's prompt index
--   (nemo.rl.prompt.idx) is a row of an RL try, listed as that try (the join rule,
--   docs/gym-telemetry.md). The Gym rows come from gym_attempts.
CREATE OR REPLACE VIEW rollout_attempts AS
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
         ELSE coalesce(rollout_outcome,
                       CASE WHEN status_code = 'ERROR' THEN 'failed' ELSE 'committed' END)
    END AS outcome,
    failure_class,
    failure_reason,
    TRY_CAST(attributes->>'nemo.rl.failure.http_status' AS INTEGER) AS failure_http_status,
    attributes->>'nemo.rl.failure.detail' AS failure_detail,
    TRY_CAST(attributes->>'nemo.rl.weight_version' AS BIGINT) AS weight_version,
    (end_ns - start_ns) / 1e9 AS duration_s,
    trace_id,
    span_id,
    is_open
FROM all_spans
WHERE name = 'rl.rollout.attempt'
UNION ALL
SELECT * FROM gym_attempts
