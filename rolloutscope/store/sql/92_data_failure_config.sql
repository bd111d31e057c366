-- data_failure_config (P12 in docs/domain/incidents.md; NVIDIA-NeMo/RL #3590): deterministic data
-- failures that are really a configuration mismatch: HTTP 400 "maximum context length" from the
-- engine means the trainer's max_total_sequence_length exceeds the engine's max_model_len. One
-- incident per run.
CREATE OR REPLACE VIEW data_failure_config AS
WITH failures AS (
    SELECT run_id, count(*) AS failures, count(DISTINCT prompt_idx) AS prompts,
           min(start_ns) AS first_ns, max(end_ns) AS last_ns,
           list(span_id ORDER BY start_ns)[1:5] AS ids
    FROM rollout_attempts
    WHERE failure_class = 'data' AND failure_http_status = 400
      AND failure_detail ILIKE '%maximum context length%'
    GROUP BY run_id
)
SELECT
    f.run_id,
    'p12-' || substr(md5(f.run_id), 1, 9) AS incident_id,
    'data_failure_config' AS kind,
    'warning' AS severity,
    f.first_ns AS start_ns,
    f.last_ns AS end_ns,
    'config' AS subject,
    format('{} data failure(s) on {} prompt(s) were HTTP 400 "maximum context length" from the '
           'engine: max_total_sequence_length exceeds the engine''s max_model_len.',
           f.failures, f.prompts) AS summary,
    f.ids AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM failures f
