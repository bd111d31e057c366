-- run_thresholds: per run, its time range and time zero, and every threshold the incident views
-- compare against, read from the config the run recorded (runs.config: the replay scenario's
-- nested config, or flat keys from an import), else the documented default of the system observed
-- (docs/domain/checkpoint-protocol.md#timeouts-and-config, docs/domain/fleet-health.md#config,
-- docs/domain/rollouts-and-deadlines.md). A NULL rollout_timeout_s means the run had no rollout
-- deadline; a NULL max_num_steps means the run did not say, and every idle stretch counts as work
-- remaining. The engine thresholds (engine_wedged, engine_saturated, engine_backlog_while_healthy;
-- docs/domain/incidents.md#p16--engine-wedged) are flat keys of rolloutscope's own, with its
-- defaults: vLLM has no such settings.
CREATE OR REPLACE VIEW run_thresholds AS
WITH runs_seen AS (
    SELECT r.run_id, r.config, r.metadata,
           coalesce(r.first_seen_ns, s.first_ns, m.first_ns) AS start_ns,
           coalesce(r.last_seen_ns, s.last_ns, m.last_ns) AS end_ns
    FROM runs r
    -- the writer keeps first/last seen on runs; scan the spans only for a run without them
    LEFT JOIN (SELECT run_id, min(start_ns) AS first_ns,
                      max(coalesce(end_ns, start_ns)) AS last_ns
               FROM all_spans
               WHERE run_id IN (SELECT run_id FROM runs
                                WHERE first_seen_ns IS NULL OR last_seen_ns IS NULL)
               GROUP BY run_id) s USING (run_id)
    -- and its metric points for a run without spans (engines scraped, nothing traced yet)
    LEFT JOIN (SELECT run_id, min(ts_ns) AS first_ns, max(ts_ns) AS last_ns
               FROM metrics
               WHERE run_id IN (SELECT run_id FROM runs
                                WHERE first_seen_ns IS NULL OR last_seen_ns IS NULL)
               GROUP BY run_id) m USING (run_id)
)
SELECT
    run_id,
    start_ns,
    end_ns,
    -- time zero, which every reader counts seconds from: the clock origin the run recorded (a
    -- replay's epoch, so a replayed window keeps the capture's clock), else its first moment
    coalesce(TRY_CAST(metadata->>'$.origin_ns' AS BIGINT), start_ns) AS origin_ns,
    TRY_CAST(coalesce(config->>'$.rollout.rollout_timeout_s', config->>'$.rollout_timeout_s')
             AS DOUBLE) AS rollout_timeout_s,
    coalesce(TRY_CAST(coalesce(config->>'$.checkpoint.prepare_timeout_s',
                               config->>'$.prepare_timeout_s') AS DOUBLE), 300.0)
        AS prepare_timeout_s,
    coalesce(TRY_CAST(coalesce(config->>'$.checkpoint.lease_grace_s',
                               config->>'$.lease_grace_seconds') AS DOUBLE), 600.0)
        AS lease_grace_s,
    coalesce(TRY_CAST(coalesce(config->>'$.watchdog.stall_timeout_s',
                               config->>'$.stall_timeout_s') AS DOUBLE), 600.0)
        AS stall_timeout_s,
    coalesce(TRY_CAST(coalesce(config->>'$.watchdog.interval_s',
                               config->>'$.watchdog_interval_s') AS DOUBLE), 30.0)
        AS watchdog_interval_s,
    TRY_CAST(coalesce(config->>'$.training.max_num_steps', config->>'$.max_num_steps')
             AS BIGINT) AS max_num_steps,
    coalesce(TRY_CAST(coalesce(config->>'$.fleet.unhealthy_threshold',
                               config->>'$.unhealthy_threshold') AS INTEGER), 3)
        AS unhealthy_threshold,
    coalesce(TRY_CAST(coalesce(config->>'$.router.backend_timeout_s',
                               config->>'$.backend_timeout_s') AS DOUBLE), 600.0)
        AS backend_timeout_s,
    coalesce(TRY_CAST(coalesce(config->>'$.rollout.max_infra_attempts_per_prompt',
                               config->>'$.max_infra_attempts_per_prompt') AS INTEGER), 5)
        AS max_infra_attempts_per_prompt,
    -- an engine holding requests and finishing none this long is wedged
    coalesce(TRY_CAST(config->>'$.engine_wedged_s' AS DOUBLE), 120.0) AS engine_wedged_s,
    -- an engine is saturated when, over engine_saturation_window_s, at least this share of its
    -- finished requests' end-to-end time was spent queued
    coalesce(TRY_CAST(config->>'$.engine_saturation_window_s' AS DOUBLE), 60.0)
        AS engine_saturation_window_s,
    coalesce(TRY_CAST(config->>'$.engine_saturated_queue_share' AS DOUBLE), 0.5)
        AS engine_saturated_queue_share,
    -- a healthy shard's engine whose waiting requests grow this long
    coalesce(TRY_CAST(config->>'$.engine_backlog_s' AS DOUBLE), 60.0) AS engine_backlog_s
FROM runs_seen
