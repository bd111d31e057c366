-- services: one row per process that sent spans to a run: its service.name and process.pid,
-- with what identifies a released Gym server (nemo.gym.server.name and server.type, Gym's
-- version) and the SDK. service.instance.id is shown as sent, but for Gym it is
-- "<run id>-rank0" in every process, so process.pid is what tells Gym's servers apart.
CREATE OR REPLACE VIEW services AS
WITH by_resource AS (
    SELECT run_id, resource, count(*) AS spans, min(start_ns) AS first_ns,
           max(coalesce(end_ns, start_ns)) AS last_ns
    FROM all_spans
    GROUP BY run_id, resource
)
SELECT
    run_id,
    resource->>'service.name' AS service,
    TRY_CAST(resource->>'process.pid' AS BIGINT) AS pid,
    resource->>'host.name' AS host,
    resource->>'nemo.gym.server.name' AS gym_server_name,
    resource->>'nemo.gym.server.type' AS gym_server_type,
    resource->>'nemo.gym.version' AS gym_version,
    resource->>'service.instance.id' AS instance_id,
    resource->>'service.version' AS service_version,
    (resource->>'telemetry.sdk.language') || ' ' || (resource->>'telemetry.sdk.name') || ' '
        || (resource->>'telemetry.sdk.version') AS sdk,
    (resource->>'nemo.run.id') IS NOT NULL AS names_run,
    CAST(sum(spans) AS BIGINT) AS spans,
    min(first_ns) AS first_ns,
    max(last_ns) AS last_ns
FROM by_resource
GROUP BY ALL
