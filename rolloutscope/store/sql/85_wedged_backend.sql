-- wedged_backend (P5 in docs/domain/incidents.md; NVIDIA-NeMo/RL #3590): a shard whose engine
-- answers every liveness probe while its generations fail (router backend errors or
-- adapter-reported failures). Needs at least unhealthy_threshold failures and at least one probe
-- in the failing stretch, every one of them OK. Before the separate reported-failure streak, such
-- a shard oscillated healthy <-> suspect forever; oscillations counts those flips. A router
-- request's status is its http.response.status_code, or the older http.status_code (http_status).
-- From plain HTTP spans (released Gym, any OTel client): a model backend (http_requests.target)
-- whose generation requests failed (>= 500, or no answer) at least unhealthy_threshold times
-- while every liveness probe of the same backend in that stretch (a GET of /health, /v1/models,
-- ...) answered OK, at least one of them.
-- From instrumented LLM clients (llm_calls: OTel GenAI) whose HTTP library is not traced: the
-- call spans with no HTTP try of their own traced, failed (>= 500, or no answer), at one backend
-- (server.address:server.port), probed as above (a probe's target names the same host:port).
CREATE OR REPLACE VIEW wedged_backend AS
WITH failures AS (
    SELECT run_id, shard_idx, start_ns AS ts_ns, span_id FROM all_spans
    WHERE name = 'rl.router.request' AND shard_idx IS NOT NULL
      AND ((attributes->>'nemo.rl.router.outcome') = 'backend_error'
           OR http_status >= 500)
    UNION ALL
    SELECT run_id, shard_idx, ts_ns, span_id FROM span_events
    WHERE name = 'rl.gen_fleet.reported_failure' AND shard_idx IS NOT NULL
),
per_shard AS (
    SELECT run_id, shard_idx, count(*) AS failures, min(ts_ns) AS first_ns,
           max(ts_ns) AS last_ns, list(span_id ORDER BY ts_ns)[1:5] AS sample_ids
    FROM failures GROUP BY run_id, shard_idx
),
probed AS (
    SELECT f.*,
           (SELECT count(*) FILTER (WHERE (e.attributes->>'nemo.rl.probe.ok') = 'true')
            FROM span_events e WHERE e.run_id = f.run_id AND e.name = 'rl.gen_fleet.probe'
              AND e.shard_idx = f.shard_idx AND e.ts_ns BETWEEN f.first_ns AND f.last_ns)
               AS probes_ok,
           (SELECT count(*) FILTER (WHERE (e.attributes->>'nemo.rl.probe.ok') <> 'true')
            FROM span_events e WHERE e.run_id = f.run_id AND e.name = 'rl.gen_fleet.probe'
              AND e.shard_idx = f.shard_idx AND e.ts_ns BETWEEN f.first_ns AND f.last_ns)
               AS probes_failed,
           (SELECT count(*) FROM shard_states s
            WHERE s.run_id = f.run_id AND s.shard_idx = f.shard_idx
              AND s.state = 'healthy' AND s.previous_state = 'suspect') AS oscillations,
           (SELECT min(s.start_ns) FROM shard_states s
            WHERE s.run_id = f.run_id AND s.shard_idx = f.shard_idx AND s.state = 'dead')
               AS dead_ns
    FROM per_shard f
),
http_failures AS (
    SELECT run_id, target, count(*) AS failures, min(start_ns) AS first_ns,
           max(coalesce(end_ns, start_ns)) AS last_ns, list(span_id ORDER BY start_ns)[1:5]
               AS sample_ids
    FROM http_requests
    -- a 5xx, or no answer at all; a model endpoint's URL names its target. The status alone is
    -- tested first: DuckDB tests it as it reads the spans, so the rest (outcome reads the
    -- attributes JSON) reads only the requests it keeps (a few thousand of 656k at 10M spans)
    WHERE (http_status >= 500 OR http_status IS NULL)
      AND coalesce(http_status >= 500, outcome = 'error') AND model_endpoint AND NOT internal
    GROUP BY run_id, target
),
probes AS (
    SELECT run_id, target, start_ns, outcome
    FROM http_requests
    -- a liveness route's path is part of its URL: testing the URL for one first, DuckDB reads
    -- the method (from the attributes JSON) of those requests alone, not of every request
    WHERE (url LIKE '%/health%' OR url LIKE '%/ping%' OR url LIKE '%/ready%'
           OR url LIKE '%/live%' OR url LIKE '%/v1/models%')
      AND probe
),
llm_failures AS (
    SELECT run_id, backend, count(*) AS failures, min(start_ns) AS first_ns,
           max(coalesce(end_ns, start_ns)) AS last_ns, list(span_id ORDER BY start_ns)[1:5]
               AS sample_ids
    FROM llm_calls l
    WHERE backend IS NOT NULL
      AND coalesce(http_status >= 500, status_code = 'ERROR')
      -- no HTTP try under it: a CLIENT span with a URL
      AND NOT EXISTS (SELECT 1 FROM all_spans h
                      WHERE h.kind = 'CLIENT' AND h.url IS NOT NULL AND h.run_id = l.run_id
                        AND h.trace_id = l.trace_id AND h.parent_span_id = l.span_id)
    GROUP BY run_id, backend
),
llm_probed AS (
    SELECT f.*,
           count(*) FILTER (WHERE p.outcome = 'ok') AS probes_ok,
           count(*) FILTER (WHERE p.outcome = 'error') AS probes_failed
    FROM llm_failures f
    LEFT JOIN probes p
        ON p.run_id = f.run_id AND regexp_extract(p.target, '://(.*)$', 1) = f.backend
       AND p.start_ns BETWEEN f.first_ns AND f.last_ns
    GROUP BY ALL
),
http_probed AS (
    SELECT f.*,
           count(*) FILTER (WHERE p.outcome = 'ok') AS probes_ok,
           count(*) FILTER (WHERE p.outcome = 'error') AS probes_failed
    FROM http_failures f
    LEFT JOIN probes p
        ON p.run_id = f.run_id AND p.target = f.target
       AND p.start_ns BETWEEN f.first_ns AND f.last_ns
    GROUP BY ALL
)
SELECT
    p.run_id,
    'p5-' || substr(md5(p.run_id || p.shard_idx || p.first_ns), 1, 10) AS incident_id,
    'wedged_backend' AS kind,
    'critical' AS severity,
    p.first_ns AS start_ns,
    coalesce(p.dead_ns, p.last_ns) AS end_ns,
    'shard ' || p.shard_idx AS subject,
    format('Shard {} answered all {} liveness probes while failing {} generations from {:.1f} s; '
           '{}.',
           p.shard_idx, p.probes_ok, p.failures, (p.first_ns - t.origin_ns) / 1e9,
           CASE WHEN p.dead_ns IS NOT NULL
                THEN format('reported failures condemned it at {:.1f} s',
                            (p.dead_ns - t.origin_ns) / 1e9)
                ELSE format('it was never quarantined ({} healthy <- suspect flip(s))',
                            p.oscillations) END) AS summary,
    p.sample_ids AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by,
    p.shard_idx
FROM probed p
JOIN run_thresholds t ON t.run_id = p.run_id
WHERE p.failures >= t.unhealthy_threshold AND p.probes_ok > 0 AND p.probes_failed = 0
UNION ALL
SELECT
    p.run_id,
    'p5-' || substr(md5(p.run_id || p.target || p.first_ns), 1, 10) AS incident_id,
    'wedged_backend' AS kind,
    'critical' AS severity,
    p.first_ns AS start_ns,
    p.last_ns AS end_ns,
    'backend ' || p.target AS subject,
    format('Backend {} answered all {} liveness probes while failing {} generations from '
           '{:.1f} s to {:.1f} s.',
           p.target, p.probes_ok, p.failures, (p.first_ns - t.origin_ns) / 1e9,
           (p.last_ns - t.origin_ns) / 1e9) AS summary,
    p.sample_ids AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by,
    CAST(NULL AS INTEGER) AS shard_idx
FROM http_probed p
JOIN run_thresholds t ON t.run_id = p.run_id
WHERE p.failures >= t.unhealthy_threshold AND p.probes_ok > 0 AND p.probes_failed = 0
UNION ALL
SELECT
    p.run_id,
    'p5-' || substr(md5(p.run_id || p.backend || p.first_ns), 1, 10) AS incident_id,
    'wedged_backend' AS kind,
    'critical' AS severity,
    p.first_ns AS start_ns,
    p.last_ns AS end_ns,
    'backend ' || p.backend AS subject,
    format('Backend {} answered all {} liveness probes while failing {} generations from '
           '{:.1f} s to {:.1f} s.',
           p.backend, p.probes_ok, p.failures, (p.first_ns - t.origin_ns) / 1e9,
           (p.last_ns - t.origin_ns) / 1e9) AS summary,
    p.sample_ids AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by,
    CAST(NULL AS INTEGER) AS shard_idx
FROM llm_probed p
JOIN run_thresholds t ON t.run_id = p.run_id
WHERE p.failures >= t.unhealthy_threshold AND p.probes_ok > 0 AND p.probes_failed = 0
