-- gym_metrics: released Gym's own instruments (gym.*: gym.rollout.duration_ms,
-- gym.verify.duration_ms, gym.verify.success_rate, gym.servers.active,
-- gym.http.connection_pool.connect_total, ...), one row per (run, service, metric, attribute
-- set) with its latest point. Gym's SDK exports cumulative totals, so the latest histogram
-- point holds every call the process saw (count, sum, min, max): these count what spans may
-- not show (verify calls made outside a rollout, rollouts of a deployment traced without the
-- rollout span group). value is a gauge's or counter's latest value, low / high its range over
-- the run (gym.servers.active: how many servers ran, and 0 once the deployment shut down).
CREATE OR REPLACE VIEW gym_metrics AS
SELECT
    run_id,
    service,
    name,
    attributes,
    any_value(kind) AS kind,
    any_value(unit) AS unit,
    count(*) AS points,
    arg_max(count, ts_ns) AS count,
    arg_max(sum, ts_ns) AS sum,
    arg_max(sum, ts_ns) / nullif(arg_max(count, ts_ns), 0) AS mean,
    arg_max(min, ts_ns) AS min,
    arg_max(max, ts_ns) AS max,
    arg_max(value, ts_ns) AS value,
    min(value) AS low,
    max(value) AS high,
    min(ts_ns) AS first_ns,
    max(ts_ns) AS last_ns
FROM metrics
WHERE name LIKE 'gym.%'
GROUP BY run_id, service, name, attributes
