-- serving_samples: the stall watchdog's samples of how many generation backends the router routes
-- to (router/serving_backends) and how many shards the fleet counts as serving
-- (gen_fleet/serving_shards), one row per run and sample instant
-- (docs/domain/fleet-health.md#metrics). Either may be NULL where only one was published. The
-- router reading more than the fleet is P4's divergence.
CREATE OR REPLACE VIEW serving_samples AS
SELECT
    run_id,
    ts_ns,
    max(value) FILTER (WHERE name = 'router/serving_backends') AS router_serving,
    max(value) FILTER (WHERE name = 'gen_fleet/serving_shards') AS fleet_serving
FROM metrics
WHERE name IN ('router/serving_backends', 'gen_fleet/serving_shards')
GROUP BY run_id, ts_ns
