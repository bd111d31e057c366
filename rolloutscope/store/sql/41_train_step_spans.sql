-- train_step_spans: one row per rolloutscope rl.train_step span (a train step's training, as a
-- wrapped controller, a replay or an imported log records it): step is nemo.rl.train.step
-- (NULL where the span names none), end_ns NULL while the training runs. Each row is one span's,
-- so the store keeps them as spans arrive (store/derived.py): they bound the steps of the
-- per-step summaries without reading the run's spans (store/summaries.py). train_steps
-- (97_train_steps.sql) reads these spans and NeMo-RL's own step spans in full.
CREATE OR REPLACE VIEW train_step_spans AS
SELECT
    run_id,
    TRY_CAST(attributes->>'nemo.rl.train.step' AS BIGINT) AS step,
    start_ns,
    end_ns,
    span_id,
    is_open
FROM all_spans
WHERE name = 'rl.train_step'
