-- span_catalog: what a run holds, by process and span name: one row per (service, span name,
-- kind), with how many, how many failed or are still open, and their time range and durations.
-- The summary a reader shows when a run has none of the spans a model view reads ("here is what
-- there is"). dialect says whose vocabulary the name is: rl (rolloutscope's rl.* spans and the
-- gym.* intervals its wrappers add), gym (released Gym: gym.rollout, gym.model.*, gym.verify,
-- gym.agent.responses, the draft gym.checkpoint.*), or otel (anything else: HTTP server and
-- client spans, other SDKs).
CREATE OR REPLACE VIEW span_catalog AS
SELECT
    run_id,
    service,
    name,
    kind,
    CASE WHEN name LIKE 'rl.%' OR name LIKE 'rolloutscope.%'
              OR name IN ('gym.agent.execution', 'gym.agent.parked', 'gym.model.response_held',
                          'gym.agent.completed_unacknowledged', 'gym.checkpoint.open',
                          'gym.checkpoint.status', 'gym.checkpoint.acknowledge',
                          'gym.checkpoint.refused_request')
              THEN 'rl'
         WHEN name LIKE 'gym.%' THEN 'gym'
         ELSE 'otel' END AS dialect,
    count(*) AS spans,
    count(*) FILTER (WHERE status_code = 'ERROR') AS errors,
    count(*) FILTER (WHERE is_open) AS open,
    min(start_ns) AS first_ns,
    max(coalesce(end_ns, start_ns)) AS last_ns,
    median((end_ns - start_ns) / 1e9) AS median_s,
    max((end_ns - start_ns) / 1e9) AS max_s
FROM all_spans
GROUP BY run_id, service, name, kind
