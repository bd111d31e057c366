-- retry_storm (P6 in docs/domain/incidents.md): one model call retried again and again on a
-- rate-limit status (429, 502, 503, 504, 520), the Gym client raising its retry ceiling on every
-- try, so the call only ends when the prompt group's deadline does. Before the router answered 500
-- on a backend timeout, every such try lasted about backend_timeout_s. Three or more retries of
-- one call with a rising ceiling make a storm. One call is one span, or, where its retries carry
-- the call's id (nemo.gym.model_call.id), every retry of that id: each try then has a span of its
-- own, and a call that storms for ever never ends the span that would hold them all.
CREATE OR REPLACE VIEW retry_storm AS
WITH retries AS (
    SELECT run_id, trace_id, min(span_id) AS span_id, any_value(span_name) AS span_name,
           any_value(rollout_id) AS rollout_id, any_value(attempt) AS attempt,
           count(*) AS retries, min(ts_ns) AS first_ns, max(ts_ns) AS last_ns,
           mode(TRY_CAST(attributes->>'http.response.status_code' AS INTEGER)) AS status,
           min(TRY_CAST(attributes->>'nemo.gym.retry.max_tries' AS INTEGER)) AS first_ceiling,
           max(TRY_CAST(attributes->>'nemo.gym.retry.max_tries' AS INTEGER)) AS last_ceiling
    FROM span_events
    WHERE name = 'gym.model.retry'
      AND TRY_CAST(attributes->>'http.response.status_code' AS INTEGER)
          IN (429, 502, 503, 504, 520)
    GROUP BY run_id, trace_id, coalesce(attributes->>'nemo.gym.model_call.id', span_id)
)
SELECT
    r.run_id,
    'p6-' || substr(md5(r.run_id || r.span_id), 1, 10) AS incident_id,
    'retry_storm' AS kind,
    'critical' AS severity,
    r.first_ns AS start_ns,
    r.last_ns AS end_ns,
    coalesce(r.rollout_id, r.span_name) || coalesce(' try ' || r.attempt, '') AS subject,
    format('A model call of {} was retried {} times on HTTP {} over {:.0f} s, the retry ceiling '
           'rising from {} to {}; it can only end at the prompt group''s deadline.',
           coalesce(r.rollout_id, 'an unknown rollout'), r.retries, r.status,
           (r.last_ns - r.first_ns) / 1e9, r.first_ceiling, r.last_ceiling) AS summary,
    [r.span_id] AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM retries r
WHERE r.retries >= 3 AND r.last_ceiling > r.first_ceiling
