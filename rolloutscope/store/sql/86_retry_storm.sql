-- retry_storm (P6 in docs/domain/incidents.md): one model call retried again and again on a
-- rate-limit status (429, 502, 503, 504, 520), the Gym client raising its retry ceiling on every
-- try, so the call only ends when the prompt group's deadline does. Before the router answered 500
-- on a backend timeout, every such try lasted about backend_timeout_s. Three or more retries of
-- one call with a rising ceiling make a storm. One call is one span, or, where its retries carry
-- the call's id (nemo.gym.model_call.id), every retry of that id: each try then has a span of its
-- own, and a call that storms for ever never ends the span that would hold them all.
-- Released Gym records no retry events, but its model client sends every try as its own HTTP
-- request (a CLIENT span under the call's span, with the status it got): a call to a model
-- backend answered with a rate-limit status on four or more tries is a storm there, since a
-- client that does not raise its ceiling gives up after max_http_attempts (3) tries.
-- An instrumented LLM client (llm_calls: OTel GenAI, OpenInference) whose HTTP library is not
-- traced records each try of a call its code repeats as a call span of its own, under the span
-- of the step that repeats it: four or more calls under one parent span, to one backend and
-- model, each answered a rate-limit status and none with an HTTP try of its own traced (those
-- tries are http_requests, above), are one call storming.
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
),
http_storms AS (
    SELECT run_id, trace_id, parent_span_id, target,
           min(span_id) AS span_id, list(span_id ORDER BY start_ns)[1:5] AS sample_ids,
           any_value(capture_key) AS rollout_id,
           count(*) AS retries, min(start_ns) AS first_ns,
           max(coalesce(end_ns, start_ns)) AS last_ns, mode(http_status) AS status
    FROM http_requests
    -- the range first: DuckDB applies it as it reads the spans, where it tests a list of statuses
    -- only after reading every column of the ~300k requests it cannot rule out
    WHERE http_status BETWEEN 429 AND 520 AND http_status IN (429, 502, 503, 504, 520)
      AND model_endpoint AND NOT internal
    GROUP BY run_id, trace_id, parent_span_id, target
    HAVING count(*) >= 4
),
llm_storms AS (
    SELECT run_id, trace_id, parent_span_id, backend, model,
           min(span_id) AS span_id, list(span_id ORDER BY start_ns)[1:5] AS sample_ids,
           any_value(capture_key) AS rollout_id, any_value(source) AS source,
           count(*) AS retries, min(start_ns) AS first_ns,
           max(coalesce(end_ns, start_ns)) AS last_ns, mode(http_status) AS status
    FROM llm_calls l
    WHERE http_status IN (429, 502, 503, 504, 520) AND parent_span_id IS NOT NULL
      -- no HTTP try under it: a CLIENT span with a URL
      AND NOT EXISTS (SELECT 1 FROM all_spans h
                      WHERE h.kind = 'CLIENT' AND h.url IS NOT NULL AND h.run_id = l.run_id
                        AND h.trace_id = l.trace_id AND h.parent_span_id = l.span_id)
    GROUP BY run_id, trace_id, parent_span_id, backend, model
    HAVING count(*) >= 4
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
UNION ALL
SELECT
    h.run_id,
    'p6-' || substr(md5(h.run_id || h.span_id), 1, 10) AS incident_id,
    'retry_storm' AS kind,
    'critical' AS severity,
    h.first_ns AS start_ns,
    h.last_ns AS end_ns,
    coalesce(h.rollout_id, h.target) AS subject,
    format('A model call of {} to {} was answered HTTP {} on {} tries over {:.0f} s; Gym''s '
           'client raises its retry ceiling on each rate-limit answer, so the call can only end '
           'at the rollout''s deadline.',
           coalesce(h.rollout_id, 'an unknown rollout'), h.target, h.status, h.retries,
           (h.last_ns - h.first_ns) / 1e9) AS summary,
    h.sample_ids AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM http_storms h
UNION ALL
SELECT
    l.run_id,
    'p6-' || substr(md5(l.run_id || l.span_id), 1, 10) AS incident_id,
    'retry_storm' AS kind,
    'critical' AS severity,
    l.first_ns AS start_ns,
    l.last_ns AS end_ns,
    coalesce(l.rollout_id, l.backend, l.model) AS subject,
    format('A model call of {} to {} ({}) was made {} times over {:.0f} s under one parent span '
           '({} spans), each answered HTTP {}; a client that keeps retrying a rate-limited '
           'backend can only end at its deadline.',
           coalesce(l.rollout_id, 'an unknown rollout'), coalesce(l.backend, 'an unknown backend'),
           coalesce(l.model, 'unknown model'), l.retries, (l.last_ns - l.first_ns) / 1e9,
           l.source, l.status) AS summary,
    l.sample_ids AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM llm_storms l
