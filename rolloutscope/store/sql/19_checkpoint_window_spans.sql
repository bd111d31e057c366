-- checkpoint_window_spans: the spans checkpoint_windows reads besides the operations, one row
-- each: source 'interval' for an admission interval of a checkpoint (every participant's
-- gym.checkpoint.open, and the RL admission fence rl.admission.fence owned by the gym
-- checkpoint), 'snapshot' for an RL snapshot transaction (rl.rollout_snapshot), with its index
-- and outcome. Only spans that name their checkpoint. A view of its own because each row is one
-- span's: the store keeps these rows as spans arrive (store/derived.py), and checkpoint_windows
-- groups them and the kept checkpoint_ops instead of every span.
CREATE OR REPLACE VIEW checkpoint_window_spans AS
SELECT
    run_id,
    checkpoint_id,
    CASE WHEN name = 'rl.rollout_snapshot' THEN 'snapshot' ELSE 'interval' END AS source,
    start_ns,
    end_ns,
    CASE WHEN name = 'rl.rollout_snapshot'
         THEN TRY_CAST(attributes->>'nemo.rl.snapshot.index' AS INTEGER) END AS snapshot_index,
    CASE WHEN name = 'rl.rollout_snapshot'
         THEN attributes->>'nemo.rl.snapshot.outcome' END AS snapshot_outcome
FROM all_spans
-- the names first, on their own: DuckDB prunes the spans on them (an OR is tested on every span)
WHERE checkpoint_id IS NOT NULL
  AND name IN ('gym.checkpoint.open', 'rl.admission.fence', 'rl.rollout_snapshot')
  AND (name IN ('gym.checkpoint.open', 'rl.rollout_snapshot')
       OR coalesce(attributes->>'nemo.rl.fence.owner', 'gym_checkpoint') = 'gym_checkpoint')
