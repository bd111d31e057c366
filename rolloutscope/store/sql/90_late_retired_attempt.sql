-- late_retired_attempt (P10 in docs/domain/incidents.md): requests of an attempt that was already
-- retired, refused with stale_attempt. Expected right after a retire (info); a refusal after a
-- successful forget in the run means something still runs that should not (warning; forget spans
-- carry no per-rollout list, so this is judged per run).
CREATE OR REPLACE VIEW late_retired_attempt AS
WITH refusals AS (
    SELECT run_id, rollout_id, attempt, count(*) AS refusals, min(ts_ns) AS first_ns,
           max(ts_ns) AS last_ns, list(span_id ORDER BY ts_ns)[1:5] AS ids
    FROM span_events
    WHERE name = 'gym.checkpoint.refused'
      AND (attributes->>'nemo.gym.checkpoint.code') = 'stale_attempt'
    GROUP BY run_id, rollout_id, attempt
)
SELECT
    r.run_id,
    'p10-' || substr(md5(r.run_id || coalesce(r.rollout_id, '') || coalesce(r.attempt, -1)), 1, 9)
        AS incident_id,
    'late_retired_attempt' AS kind,
    CASE WHEN f.forgot_ns IS NOT NULL AND r.last_ns > f.forgot_ns THEN 'warning' ELSE 'info' END
        AS severity,
    r.first_ns AS start_ns,
    r.last_ns AS end_ns,
    coalesce(r.rollout_id, 'unknown rollout') || coalesce(' try ' || r.attempt, '') AS subject,
    format('{} request(s) of retired {} refused with stale_attempt from {:.1f} s{}.',
           r.refusals, coalesce(r.rollout_id, 'unknown rollout'), (r.first_ns - t.origin_ns) / 1e9,
           CASE WHEN f.forgot_ns IS NOT NULL AND r.last_ns > f.forgot_ns
                THEN ', some after the rollout was forgotten: something still runs it'
                ELSE '' END) AS summary,
    r.ids AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM refusals r
JOIN run_thresholds t ON t.run_id = r.run_id
LEFT JOIN (SELECT run_id, min(end_ns) AS forgot_ns FROM checkpoint_ops
           WHERE op = 'forget' AND outcome = 'ok' GROUP BY run_id) f ON f.run_id = r.run_id
