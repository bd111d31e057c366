-- rollout_staleness: how far behind the trainer the data it trained on was (off-policy lag,
-- docs/wait-board.md#staleness): one row per RL try (unit 'try', rl.rollout.attempt), per batch
-- RL's own telemetry collected (unit 'batch', rl.<algorithm>.collect_rollouts), and per sync
-- that aborted stale rollouts in flight (unit 'aborted', its rl.weight_sync.aborted_stale_inflight
-- event). Versions count trainer updates, in the weight syncs' numbering
-- (nemo.rl.trainer_version).
-- - weight_version: the policy version the data was generated with: the try's own
--   nemo.rl.weight_version where it carries one (weight_version_from 'span'), else the version
--   of the newest weight sync that ended before the try started, the weights the fleet served
--   when it was dispatched ('last_weight_sync'; 0, the initial weights, before the first sync of
--   a run that syncs or trains: 'initial'); a batch's rl.weight_version.
-- - train_step, trained_version: the train step that trained on it and the trainer's version
--   when that step began: for a committed try, the first rl.train_step to start at or after it
--   committed, whose nemo.rl.trainer_version where it carries one, else the count of the run's
--   train steps ended before it began; for a batch, its rl.target_weight_version (the step it
--   was collected for); for an abort, the version of the sync that aborted them. NULL while
--   nothing trained on it yet, or when it was not committed.
-- - lag: trained_version - weight_version, the versions the trainer had moved past the policy
--   that generated the data (NeMo-RL's async GRPO evicts groups whose lag exceeds its window,
--   max_trajectory_age_steps / max_staleness_versions, and aborts the in-flight ones at a sync).
-- - groups: prompt groups the row stands for (1 a try; a batch's rl.num_prompt_groups; an
--   abort's nemo.rl.aborted_stale_inflight_groups). outcome: the try's outcome, 'collected',
--   'aborted'. reason: why an aborted row was dropped.
-- rollout_staleness_window(run, floor_ns): the rows of run (NULL: every run) that end at or after
-- floor_ns, and the open ones (NULL: every row): a window's read. Its tries are rl_attempts'
-- rows (the store keeps them as spans arrive, in the order they end), so a floored read of a
-- maintained store reads the window's tries, not every span of the run; the weight syncs and
-- train steps it joins them to are the run's (a few per step).
CREATE OR REPLACE MACRO rollout_staleness_window(run, floor_ns) AS TABLE
WITH syncs AS (
    SELECT run_id, start_ns, end_ns, span_id,
           TRY_CAST(attributes->>'nemo.rl.trainer_version' AS BIGINT) AS version
    FROM all_spans
    WHERE name = 'rl.weight_sync' AND end_ns IS NOT NULL AND (run IS NULL OR run_id = run)
),
steps AS (
    SELECT run_id, start_ns, end_ns,
           TRY_CAST(attributes->>'nemo.rl.train.step' AS BIGINT) AS step,
           TRY_CAST(attributes->>'nemo.rl.trainer_version' AS BIGINT) AS version
    FROM all_spans
    WHERE name = 'rl.train_step' AND (run IS NULL OR run_id = run)
),
-- each step's end with how many of the run's steps had ended by then
ended_steps AS (
    SELECT run_id, end_ns, row_number() OVER (PARTITION BY run_id ORDER BY end_ns) AS done
    FROM steps WHERE end_ns IS NOT NULL
),
versioned_steps AS (
    SELECT s.run_id, s.start_ns, s.step, coalesce(s.version, e.done, 0) AS version
    FROM steps s
    ASOF LEFT JOIN ended_steps e ON e.run_id = s.run_id AND s.start_ns >= e.end_ns
),
training_runs AS (
    SELECT DISTINCT run_id FROM syncs UNION SELECT DISTINCT run_id FROM steps
),
-- ended at or after the floor, and the open ones, read apart: the kept rows are in the order
-- they ended, so DuckDB's zonemaps skip those that ended before the floor (an OR is read whole)
tries AS (
    SELECT run_id, rollout_id, prompt_idx, attempt, start_ns, end_ns, trace_id, span_id,
           weight_version AS own_version, outcome
    FROM rl_attempts
    WHERE (run IS NULL OR run_id = run) AND (floor_ns IS NULL OR end_ns >= floor_ns)
    UNION ALL
    SELECT run_id, rollout_id, prompt_idx, attempt, start_ns, end_ns, trace_id, span_id,
           weight_version AS own_version, outcome
    FROM rl_attempts
    WHERE (run IS NULL OR run_id = run) AND floor_ns IS NOT NULL AND end_ns IS NULL
),
generated AS (
    SELECT t.*, y.version AS sync_version
    FROM tries t
    ASOF LEFT JOIN syncs y ON y.run_id = t.run_id AND t.start_ns >= y.end_ns
),
trained AS (
    SELECT g.*, s.step AS train_step, s.version AS trained_version
    FROM (SELECT * FROM generated WHERE outcome = 'committed') g
    ASOF LEFT JOIN versioned_steps s ON s.run_id = g.run_id AND s.start_ns >= g.end_ns
    UNION ALL
    SELECT g.*, CAST(NULL AS BIGINT), CAST(NULL AS BIGINT)
    FROM generated g WHERE outcome <> 'committed'
),
try_rows AS (
    SELECT t.run_id, 'try' AS unit, t.rollout_id, t.prompt_idx, t.attempt, t.start_ns, t.end_ns,
           coalesce(t.own_version, t.sync_version,
                    CASE WHEN r.run_id IS NOT NULL THEN 0 END) AS weight_version,
           CASE WHEN t.own_version IS NOT NULL THEN 'span'
                WHEN t.sync_version IS NOT NULL THEN 'last_weight_sync'
                WHEN r.run_id IS NOT NULL THEN 'initial' END AS weight_version_from,
           t.train_step, t.trained_version, 1 AS groups, t.outcome,
           CAST(NULL AS VARCHAR) AS reason, t.trace_id, t.span_id
    FROM trained t
    LEFT JOIN training_runs r ON r.run_id = t.run_id
),
-- (ended at or after the floor and open ones read apart, as the tries)
batch_spans AS (
    SELECT * FROM all_spans
    WHERE name LIKE 'rl.%.collect_rollouts' AND (run IS NULL OR run_id = run)
      AND (floor_ns IS NULL OR end_ns >= floor_ns)
    UNION ALL
    SELECT * FROM all_spans
    WHERE name LIKE 'rl.%.collect_rollouts' AND (run IS NULL OR run_id = run)
      AND floor_ns IS NOT NULL AND end_ns IS NULL
),
batch_rows AS (
    SELECT run_id, 'batch' AS unit, CAST(NULL AS VARCHAR) AS rollout_id,
           CAST(NULL AS BIGINT) AS prompt_idx, CAST(NULL AS INTEGER) AS attempt, start_ns, end_ns,
           TRY_CAST(attributes->>'rl.weight_version' AS BIGINT) AS weight_version,
           'span' AS weight_version_from,
           TRY_CAST(attributes->>'rl.target_weight_version' AS BIGINT) AS train_step,
           TRY_CAST(attributes->>'rl.target_weight_version' AS BIGINT) AS trained_version,
           coalesce(TRY_CAST(attributes->>'rl.num_prompt_groups' AS BIGINT), 1) AS groups,
           CASE WHEN end_ns IS NULL THEN 'open' ELSE 'collected' END AS outcome,
           CAST(NULL AS VARCHAR) AS reason, trace_id, span_id
    FROM batch_spans
),
abort_rows AS (
    SELECT e.run_id, 'aborted' AS unit, CAST(NULL AS VARCHAR), CAST(NULL AS BIGINT),
           CAST(NULL AS INTEGER), e.ts_ns, e.ts_ns,
           CAST(NULL AS BIGINT) AS weight_version, CAST(NULL AS VARCHAR),
           CAST(NULL AS BIGINT), y.version,
           coalesce(TRY_CAST(e.attributes->>'nemo.rl.aborted_stale_inflight_groups' AS BIGINT), 0),
           'aborted',
           'aborted in flight at the weight sync to version '
               || coalesce(CAST(y.version AS VARCHAR), '?')
               || ': generated by weights the trainer had moved past',
           e.trace_id, e.span_id
    FROM all_events e
    LEFT JOIN syncs y ON y.run_id = e.run_id AND y.span_id = e.span_id
    WHERE e.name = 'rl.weight_sync.aborted_stale_inflight' AND (run IS NULL OR e.run_id = run)
      AND (floor_ns IS NULL OR e.ts_ns >= floor_ns)
)
SELECT *, trained_version - weight_version AS lag
FROM (SELECT * FROM try_rows
      UNION ALL SELECT * FROM batch_rows
      UNION ALL SELECT * FROM abort_rows);

CREATE OR REPLACE VIEW rollout_staleness AS
SELECT * FROM rollout_staleness_window(NULL, NULL)
