-- router_fleet_divergence (P4 in docs/domain/incidents.md): the router routes to more backends
-- than the fleet considers serving, e.g. a restarted router that came back with every backend.
-- Read from the watchdog's metrics (router/serving_backends vs gen_fleet/serving_shards sampled at
-- the same tick); one incident per contiguous stretch of diverging samples.
CREATE OR REPLACE VIEW router_fleet_divergence AS
WITH samples AS (
    SELECT * FROM serving_samples
    WHERE router_serving IS NOT NULL AND fleet_serving IS NOT NULL
),
flagged AS (
    SELECT *, router_serving > fleet_serving AS diverged,
           sum(CASE WHEN router_serving > fleet_serving THEN 0 ELSE 1 END)
               OVER (PARTITION BY run_id ORDER BY ts_ns) AS stretch
    FROM samples
),
stretches AS (
    SELECT run_id, stretch, min(ts_ns) AS start_ns, max(ts_ns) AS end_ns,
           max(router_serving) AS router_serving, min(fleet_serving) AS fleet_serving,
           count(*) AS samples
    FROM flagged WHERE diverged
    GROUP BY run_id, stretch
)
SELECT
    s.run_id,
    'p4d-' || substr(md5(s.run_id || s.start_ns), 1, 9) AS incident_id,
    'router_fleet_divergence' AS kind,
    'warning' AS severity,
    s.start_ns,
    s.end_ns,
    'router' AS subject,
    format('The router served {:.0f} backend(s) while the fleet counted {:.0f} serving shard(s), '
           'from {:.1f} s for {} watchdog sample(s).',
           s.router_serving, s.fleet_serving, (s.start_ns - t.origin_ns) / 1e9, s.samples)
        AS summary,
    CAST([] AS VARCHAR[]) AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM stretches s
JOIN run_thresholds t ON t.run_id = s.run_id
