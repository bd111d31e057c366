-- incidents: every incident pattern (P1-P18 in docs/domain/incidents.md), one row each, with
-- common columns: kind (the pattern's view name), severity (critical | warning | info), start_ns /
-- end_ns (end NULL while it lasts), subject (the rollout, shard, engine, checkpoint or component it
-- concerns), summary (one sentence with the numbers), evidence (span ids to jump to) and caused_by
-- (the incident that led to this one, where the data links them). incident_id is stable for a
-- given run file: `rolloutscope incidents RUN --json` prints it and --incident options take it.
CREATE OR REPLACE VIEW incidents AS
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM deadline_fired_while_parked
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM stranded_completion
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM stall
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM quarantine
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM router_fleet_divergence
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM wedged_backend
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM retry_storm
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM prepare_blocked
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM export_failed
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM lease_expired
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM late_retired_attempt
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM redispatch_exhausted
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM data_failure_config
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM stale_weights_serving
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM cut_degraded
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM env_unhealthy
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM engine_wedged
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM engine_saturated
UNION ALL
SELECT run_id, incident_id, kind, severity, start_ns, end_ns, subject, summary, evidence, caused_by FROM engine_backlog_while_healthy
