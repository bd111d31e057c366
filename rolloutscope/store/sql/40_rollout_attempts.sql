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
-- The RL rows are the view rl_attempts (39_rl_attempts.sql).
CREATE OR REPLACE VIEW rollout_attempts AS
SELECT * FROM rl_attempts
UNION ALL
SELECT * FROM gym_attempts
