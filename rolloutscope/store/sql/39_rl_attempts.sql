-- rl_attempts: rollout_attempts' rows of dialect 'rl' (one rl.rollout.attempt span each; the
-- columns are described in 40_rollout_attempts.sql). A view of its own because each row is one
-- span's: the store keeps these rows as spans arrive (store/derived.py), and rollout_attempts
-- adds the Gym rows, which each join several spans, to them.
CREATE OR REPLACE VIEW rl_attempts AS
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
