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
-- - dialect 'rl_telemetry': a dispatch of NeMo-RL's single controller (rl.sc.generate_and_push,
--   RL #4052: one span per dispatch attempt of a prompt group, in its per_prompt span group),
--   read only for a run that has no rl.rollout.attempt (rolloutscope's RL adapters say more: the
--   prompt, its group, why a try failed). attempt is rl.rollout.attempt (0 a first try, > 0 a
--   substitution after a skipped group, whose tokens were discarded); a dispatch names no
--   prompt, so rollout_id and prompt_idx are NULL. outcome: 'open' while it runs, 'failed'
--   when its status is ERROR (failure_reason the status message), else 'committed' (its group
--   was pushed).
-- The RL rows are the view rl_attempts (39_rl_attempts.sql).
CREATE OR REPLACE VIEW rollout_attempts AS
SELECT * FROM rl_attempts
UNION ALL
SELECT * FROM gym_attempts
UNION ALL
SELECT
    s.run_id,
    'rl_telemetry' AS dialect,
    CAST(NULL AS VARCHAR) AS rollout_id,
    CAST(NULL AS BIGINT) AS prompt_idx,
    TRY_CAST(s.attributes->>'rl.rollout.attempt' AS INTEGER) AS attempt,
    CAST(NULL AS VARCHAR) AS capture_key,
    CAST(NULL AS VARCHAR) AS group_id,
    s.start_ns,
    s.end_ns,
    CASE WHEN s.end_ns IS NULL THEN 'open'
         WHEN s.status_code = 'ERROR' THEN 'failed' ELSE 'committed' END AS outcome,
    CAST(NULL AS VARCHAR) AS failure_class,
    CASE WHEN s.status_code = 'ERROR' THEN s.status_message END AS failure_reason,
    CAST(NULL AS INTEGER) AS failure_http_status,
    CAST(NULL AS VARCHAR) AS failure_detail,
    CAST(NULL AS BIGINT) AS weight_version,
    (s.end_ns - s.start_ns) / 1e9 AS duration_s,
    s.trace_id,
    s.span_id,
    s.is_open
FROM all_spans s
ANTI JOIN (SELECT DISTINCT run_id FROM rl_attempts) r ON r.run_id = s.run_id
WHERE s.name = 'rl.sc.generate_and_push'
