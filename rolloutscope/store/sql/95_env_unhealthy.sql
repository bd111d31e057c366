-- env_unhealthy (P14 in docs/domain/incidents.md): the watchdog's environment health check failed
-- — a Gym subprocess that died or stopped answering — which otherwise shows up only as unexplained
-- rollout timeouts. One incident per run and environment.
CREATE OR REPLACE VIEW env_unhealthy AS
WITH problems AS (
    SELECT run_id, attributes->>'nemo.rl.env.name' AS env, count(*) AS reports,
           min(ts_ns) AS first_ns, max(ts_ns) AS last_ns,
           arg_min(attributes->>'nemo.rl.env.problem', ts_ns) AS problem,
           list(span_id ORDER BY ts_ns)[1:5] AS ids
    FROM span_events
    WHERE name = 'rl.env_health.problem'
    GROUP BY ALL
)
SELECT
    p.run_id,
    'p14-' || substr(md5(p.run_id || coalesce(p.env, '')), 1, 9) AS incident_id,
    'env_unhealthy' AS kind,
    'warning' AS severity,
    p.first_ns AS start_ns,
    p.last_ns AS end_ns,
    'environment ' || coalesce(p.env, '?') AS subject,
    format('Environment {} failed its health check {} time(s) from {:.1f} s: {}.',
           coalesce(p.env, '?'), p.reports, (p.first_ns - t.origin_ns) / 1e9,
           coalesce(p.problem, 'no detail')) AS summary,
    p.ids AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM problems p
JOIN run_thresholds t ON t.run_id = p.run_id
