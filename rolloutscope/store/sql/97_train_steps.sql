-- train_steps: one row per train step of a run, in one of two dialects
-- (docs/train-steps.md says which dialect feeds each column):
-- - dialect 'rl_telemetry': NeMo-RL's own telemetry (nemo_rl/telemetry, RL #3655 and #4052):
--   one row per rl.<algorithm>.step span, any algorithm (rl.grpo.step, rl.ppo.step,
--   rl.sft.step, rl.sc.step, ...). algorithm is the name's middle part; for the single
--   controller (rl.sc.step) the resource's rl.algorithm, else 'sc'. step is rl.iteration,
--   epoch rl.epoch (the single controller sends none). The phases are the step's child spans
--   by their last name part, in both RL #3655's and #4052's spelling:
--     collect_rollouts_s  collect_rollouts, generation (the rollout umbrella)
--     generate_s          rl.vllm.generate / generate_text under a child (the sync path)
--     rewards_s           compute_rewards, reward_calculation
--     logprobs_s          compute_logprobs, policy_and_reference_logprobs,
--                         teacher_logprob_inference, logprob_inference_prep, value_inference,
--                         value_inference_prep
--     advantages_s        compute_advantages, advantage_calculation
--     data_processing_s   data_processing, training_prep
--     policy_update_s     policy_update, value_update, policy_training, value_training,
--                         policy_optimizer_step
--     refit_s             rl.idle.refit_bubble (waiting for the collector's safe point and the
--                         weight sync)
--     checkpoint_s        save_checkpoint, checkpointing
--   The goodput buckets (productive_s ... wasted_s) add the rl.bucket spans among the step's
--   children and grandchildren: RL buckets leaves only, so a sum by bucket counts no second
--   twice. buffer_starvation_s and refit_bubble_s are the two driver-side rl.idle.* categories
--   (rl.efficiency.category); starvation_waits counts the buffer's polls that found too few
--   groups. The rollout batches are the rl.<algorithm>.collect_rollouts / .generation spans
--   that carry rl.target_weight_version: the async collector's, which are no step's children;
--   a batch feeds the step whose trainer weights are its target (ReplayBuffer.sample takes
--   target == the trainer's weight version). The step's weight version is its own
--   rl.weight_version (rl.sc.step), else rl.iteration - 1 (async_grpo_train starts the weight
--   version at the step counter and names the iteration counter + 1). policy_lag is that
--   version minus the oldest batch's rl.weight_version: how stale the oldest weights it trained
--   on were. wait_start_ns is the step's start, ready_ns the end of its last buffer-starvation
--   poll or of its collect_rollouts child (the sync path generates inside the step), else the
--   start.
-- - dialect 'rl': rolloutscope's own rl.train_step spans (replays, wrapped controllers, imported
--   logs), used only for a run that has no rl_telemetry step: step is nemo.rl.train.step (else
--   the span's rank), the step runs from the end of the previous step's training (the run's
--   origin for the first) to the end of its own; ready_ns is the training's start, so the wait
--   is from the trainer going idle to it having enough groups. policy_update_s is the training
--   span, refit_s the rl.weight_sync time inside the step, weight_version step - 1 (a sync
--   publishes the count of steps trained), policy_lag that minus the oldest
--   nemo.rl.weight_version of the tries committed in the step's wait.
-- Times are epoch nanoseconds; a step still running has end_ns NULL.
CREATE OR REPLACE VIEW train_steps AS
WITH rl_steps AS (
    SELECT run_id, trace_id, span_id, name, start_ns, end_ns, attributes,
           split_part(name, '.', 2) AS name_algorithm,
           resource->>'rl.algorithm' AS resource_algorithm
    FROM all_spans
    -- the prefix first: DuckDB prunes the spans on it before the pattern is tested
    WHERE name LIKE 'rl.%.step' AND regexp_matches(name, '^rl\.[a-z0-9_]+\.step$')
),
children AS (  -- each rl_telemetry step's direct children
    SELECT c.run_id, s.span_id AS step_span_id, c.span_id, c.name, c.start_ns, c.end_ns,
           c.attributes,
           CASE WHEN c.name LIKE 'rl.idle.%' THEN c.name ELSE split_part(c.name, '.', 3) END
               AS phase,
           (c.end_ns - c.start_ns) / 1e9 AS duration_s
    FROM all_spans c
    JOIN rl_steps s ON s.run_id = c.run_id AND s.trace_id = c.trace_id
                   AND s.span_id = c.parent_span_id
    WHERE c.name LIKE 'rl.%'
),
grandchildren AS (  -- their children: rl.vllm.generate under a rollout, any bucketed leaf
    SELECT g.run_id, c.step_span_id, g.name, g.attributes,
           (g.end_ns - g.start_ns) / 1e9 AS duration_s
    FROM all_spans g
    JOIN children c ON c.run_id = g.run_id AND c.span_id = g.parent_span_id
    WHERE g.name LIKE 'rl.%'
),
bucketed AS (
    SELECT run_id, step_span_id, attributes->>'rl.bucket' AS bucket, duration_s
    FROM children WHERE (attributes->>'rl.bucket') IS NOT NULL
    UNION ALL
    SELECT run_id, step_span_id, attributes->>'rl.bucket', duration_s
    FROM grandchildren WHERE (attributes->>'rl.bucket') IS NOT NULL
),
buckets AS (
    SELECT run_id, step_span_id,
           sum(duration_s) FILTER (WHERE bucket = 'productive') AS productive_s,
           sum(duration_s) FILTER (WHERE bucket = 'overhead') AS overhead_s,
           sum(duration_s) FILTER (WHERE bucket = 'idle') AS idle_s,
           sum(duration_s) FILTER (WHERE bucket = 'wasted') AS wasted_s
    FROM bucketed GROUP BY run_id, step_span_id
),
generates AS (
    SELECT run_id, step_span_id, sum(duration_s) AS generate_s
    FROM grandchildren WHERE name IN ('rl.vllm.generate', 'rl.vllm.generate_text')
    GROUP BY run_id, step_span_id
),
phases AS (
    SELECT run_id, step_span_id,
           sum(duration_s) FILTER (WHERE phase IN ('collect_rollouts', 'generation'))
               AS collect_rollouts_s,
           sum(duration_s) FILTER (WHERE phase IN ('compute_rewards', 'reward_calculation'))
               AS rewards_s,
           sum(duration_s) FILTER (WHERE phase IN (
               'compute_logprobs', 'policy_and_reference_logprobs', 'teacher_logprob_inference',
               'logprob_inference_prep', 'value_inference', 'value_inference_prep'))
               AS logprobs_s,
           sum(duration_s) FILTER (WHERE phase IN ('compute_advantages', 'advantage_calculation'))
               AS advantages_s,
           sum(duration_s) FILTER (WHERE phase IN ('data_processing', 'training_prep'))
               AS data_processing_s,
           sum(duration_s) FILTER (WHERE phase IN (
               'policy_update', 'value_update', 'policy_training', 'value_training',
               'policy_optimizer_step')) AS policy_update_s,
           sum(duration_s) FILTER (WHERE phase = 'rl.idle.refit_bubble') AS refit_s,
           sum(duration_s) FILTER (WHERE phase IN ('save_checkpoint', 'checkpointing'))
               AS checkpoint_s,
           sum(duration_s) FILTER (WHERE phase = 'rl.idle.buffer_starvation')
               AS buffer_starvation_s,
           sum(duration_s) FILTER (WHERE phase = 'rl.idle.refit_bubble') AS refit_bubble_s,
           count(*) FILTER (WHERE phase = 'rl.idle.buffer_starvation') AS starvation_waits,
           max(end_ns) FILTER (WHERE phase = 'rl.idle.buffer_starvation') AS starved_until_ns,
           max(end_ns) FILTER (WHERE phase IN ('collect_rollouts', 'generation'))
               AS collected_ns,
           sum(TRY_CAST(attributes->>'rl.num_prompt_groups' AS BIGINT))
               FILTER (WHERE phase IN ('collect_rollouts', 'generation')) AS child_groups
    FROM children GROUP BY run_id, step_span_id
),
batches AS (  -- the async collector's rollout batches, by the weight version they target
    SELECT run_id,
           TRY_CAST(attributes->>'rl.target_weight_version' AS BIGINT) AS target_version,
           count(*) AS batches,
           sum(TRY_CAST(attributes->>'rl.num_prompt_groups' AS BIGINT)) AS prompt_groups,
           min(TRY_CAST(attributes->>'rl.weight_version' AS BIGINT)) AS oldest_version,
           max(TRY_CAST(attributes->>'rl.weight_version' AS BIGINT)) AS newest_version
    FROM all_spans
    WHERE name LIKE 'rl.%' AND (name LIKE 'rl.%.collect_rollouts' OR name LIKE 'rl.%.generation')
      AND (attributes->>'rl.target_weight_version') IS NOT NULL
    GROUP BY run_id, target_version
),
telemetry AS (
    SELECT
        s.run_id,
        'rl_telemetry' AS dialect,
        CASE WHEN s.name_algorithm = 'sc' THEN coalesce(s.resource_algorithm, 'sc')
             ELSE s.name_algorithm END AS algorithm,
        TRY_CAST(s.attributes->>'rl.iteration' AS BIGINT) AS step,
        TRY_CAST(s.attributes->>'rl.epoch' AS BIGINT) AS epoch,
        s.start_ns,
        s.end_ns,
        s.start_ns AS wait_start_ns,
        coalesce(p.starved_until_ns, p.collected_ns, s.start_ns) AS ready_ns,
        p.collect_rollouts_s, g.generate_s, p.rewards_s, p.logprobs_s, p.advantages_s,
        p.data_processing_s, p.policy_update_s, p.refit_s, p.checkpoint_s,
        b.productive_s, b.overhead_s, b.idle_s, b.wasted_s,
        p.buffer_starvation_s, p.refit_bubble_s, coalesce(p.starvation_waits, 0)
            AS starvation_waits,
        coalesce(TRY_CAST(s.attributes->>'rl.weight_version' AS BIGINT),
                 TRY_CAST(s.attributes->>'rl.iteration' AS BIGINT) - 1) AS weight_version,
        s.trace_id,
        s.span_id
    FROM rl_steps s
    LEFT JOIN phases p ON p.run_id = s.run_id AND p.step_span_id = s.span_id
    LEFT JOIN buckets b ON b.run_id = s.run_id AND b.step_span_id = s.span_id
    LEFT JOIN generates g ON g.run_id = s.run_id AND g.step_span_id = s.span_id
),
telemetry_batches AS (
    SELECT t.*,
           coalesce(bt.batches, 0) AS batches,
           coalesce(bt.prompt_groups, p.child_groups) AS prompt_groups,
           bt.oldest_version AS batch_weight_version,
           bt.newest_version AS batch_newest_weight_version
    FROM telemetry t
    LEFT JOIN phases p ON p.run_id = t.run_id AND p.step_span_id = t.span_id
    LEFT JOIN batches bt ON bt.run_id = t.run_id AND bt.target_version = t.weight_version
),
own AS (  -- rolloutscope's rl.train_step, for runs without an rl_telemetry step
    SELECT s.run_id, s.trace_id, s.span_id, s.start_ns, s.end_ns,
           coalesce(TRY_CAST(s.attributes->>'nemo.rl.train.step' AS BIGINT),
                    row_number() OVER (PARTITION BY s.run_id ORDER BY s.end_ns)) AS step
    FROM all_spans s
    ANTI JOIN (SELECT DISTINCT run_id FROM rl_steps) r ON r.run_id = s.run_id
    WHERE s.name = 'rl.train_step' AND s.end_ns IS NOT NULL
),
own_windows AS (
    SELECT o.*,
           -- the first step waits from the run's origin (run_thresholds: as every reader
           -- counts time), never from after its own training began
           coalesce(lag(o.end_ns) OVER (PARTITION BY o.run_id ORDER BY o.end_ns),
                    least(th.origin_ns, o.start_ns), o.start_ns) AS wait_start_ns,
           coalesce(lag(o.start_ns) OVER (PARTITION BY o.run_id ORDER BY o.end_ns), -1)
               AS previous_ready_ns
    FROM own o
    LEFT JOIN run_thresholds th ON th.run_id = o.run_id
),
syncs AS (  -- weight-sync seconds inside each own step (syncs never overlap each other)
    SELECT w.run_id, w.span_id,
           sum(least(coalesce(y.end_ns, w.end_ns), w.end_ns)
               - greatest(y.start_ns, w.wait_start_ns)) / 1e9 AS refit_s
    FROM own_windows w
    JOIN all_spans y ON y.run_id = w.run_id AND y.name = 'rl.weight_sync'
                    AND y.start_ns < w.end_ns
                    AND coalesce(y.end_ns, w.end_ns) > w.wait_start_ns
    GROUP BY w.run_id, w.span_id
),
trained_on AS (  -- the oldest weights among the tries committed in each own step's wait
    SELECT w.run_id, w.span_id, min(a.weight_version) AS oldest_version,
           max(a.weight_version) AS newest_version, count(*) AS groups
    FROM own_windows w
    JOIN rollout_attempts a ON a.run_id = w.run_id AND a.outcome IN ('committed', 'finished')
                           AND a.end_ns > w.previous_ready_ns AND a.end_ns <= w.start_ns
    GROUP BY w.run_id, w.span_id
),
own_rows AS (
    SELECT
        w.run_id,
        'rl' AS dialect,
        CAST(NULL AS VARCHAR) AS algorithm,
        w.step,
        CAST(NULL AS BIGINT) AS epoch,
        w.wait_start_ns AS start_ns,
        w.end_ns,
        w.wait_start_ns,
        w.start_ns AS ready_ns,
        CAST(NULL AS DOUBLE) AS collect_rollouts_s, CAST(NULL AS DOUBLE) AS generate_s,
        CAST(NULL AS DOUBLE) AS rewards_s, CAST(NULL AS DOUBLE) AS logprobs_s,
        CAST(NULL AS DOUBLE) AS advantages_s, CAST(NULL AS DOUBLE) AS data_processing_s,
        (w.end_ns - w.start_ns) / 1e9 AS policy_update_s,
        y.refit_s,
        CAST(NULL AS DOUBLE) AS checkpoint_s,
        CAST(NULL AS DOUBLE) AS productive_s, CAST(NULL AS DOUBLE) AS overhead_s,
        CAST(NULL AS DOUBLE) AS idle_s, CAST(NULL AS DOUBLE) AS wasted_s,
        CAST(NULL AS DOUBLE) AS buffer_starvation_s, CAST(NULL AS DOUBLE) AS refit_bubble_s,
        0 AS starvation_waits,
        w.step - 1 AS weight_version,
        w.trace_id,
        w.span_id,
        0 AS batches,
        t.groups AS prompt_groups,
        t.oldest_version AS batch_weight_version,
        t.newest_version AS batch_newest_weight_version
    FROM own_windows w
    LEFT JOIN syncs y ON y.run_id = w.run_id AND y.span_id = w.span_id
    LEFT JOIN trained_on t ON t.run_id = w.run_id AND t.span_id = w.span_id
),
rows AS (
    SELECT * FROM telemetry_batches
    UNION ALL BY NAME
    SELECT * FROM own_rows
)
SELECT
    run_id, dialect, algorithm, step, epoch, start_ns, end_ns,
    (end_ns - start_ns) / 1e9 AS duration_s,
    wait_start_ns, ready_ns,
    collect_rollouts_s, generate_s, rewards_s, logprobs_s, advantages_s, data_processing_s,
    policy_update_s, refit_s, checkpoint_s,
    productive_s, overhead_s, idle_s, wasted_s,
    buffer_starvation_s, refit_bubble_s, starvation_waits,
    weight_version, batch_weight_version, batch_newest_weight_version,
    weight_version - batch_weight_version AS policy_lag,
    batches, prompt_groups,
    trace_id, span_id
FROM rows
