-- model_calls: one row per call to a generation model, as released Gym and any OTel client
-- record it:
-- - a Gym model server's gym.model.responses / chat_completions / messages span (one call it
--   served), with the backend it forwarded the call to: the HTTP tries under that span
--   (backend, last try's status, tries, rate-limited tries);
-- - an outbound HTTP request to a generation route (http_requests.model_endpoint) that no
--   gym.model.* span accounts for and that leaves the traced deployment (not internal): e.g.
--   a model server traced without the model_call span group, or any other client.
-- Gym's agent -> model-server hop is internal (the model server's own span is the call), so one
-- call is one row. capture_key is the Gym rollout (rid or rid-aN), rollout_id and gym_attempt
-- its parts. outcome: ok | error (a failed span or a status >= 400) | open.
-- model_calls_of(run, floor_ns): the rows of run that start at or after floor_ns (NULL: every
-- run, the whole run), computed from there on: a dashboard reading the latest calls of a long
-- run scans the spans after its floor, not the run (at 10M spans 0.8 s instead of 4.8 s).
CREATE OR REPLACE MACRO model_calls_of(run, floor_ns) AS TABLE
WITH served AS (
    SELECT * FROM all_spans
    WHERE name IN ('gym.model.responses', 'gym.model.chat_completions', 'gym.model.messages')
      AND (run IS NULL OR run_id = run) AND (floor_ns IS NULL OR start_ns >= floor_ns)
),
tries AS (  -- backend tries under a served call: same process, so the parent link holds
    SELECT h.run_id, h.trace_id, h.parent_span_id,
           count(*) AS tries,
           count(*) FILTER (WHERE h.http_status IN (429, 502, 503, 504, 520)) AS rate_limited,
           arg_max(h.target, h.start_ns) AS target,
           arg_max(h.url, h.start_ns) AS url,
           arg_max(h.http_status, h.start_ns) AS http_status,
           sum(h.duration_s) AS backend_s,
           max(h.input_tokens) AS input_tokens,
           max(h.output_tokens) AS output_tokens,
           max(h.model) AS model
    FROM http_requests h
    JOIN served s ON s.run_id = h.run_id AND s.trace_id = h.trace_id
                 AND s.span_id = h.parent_span_id
    -- a try starts inside its call: the floor bounds the tries too, and the scan skips the rest
    WHERE (run IS NULL OR h.run_id = run) AND (floor_ns IS NULL OR h.start_ns >= floor_ns)
    GROUP BY h.run_id, h.trace_id, h.parent_span_id
),
calls AS (
    SELECT
        s.run_id, s.trace_id, s.span_id, 'gym' AS source, s.name, s.service,
        coalesce(s.attributes->>'nemo.gym.server.name', s.resource->>'nemo.gym.server.name')
            AS server_name,
        s.rollout_id AS capture_key,
        s.start_ns, s.end_ns, s.status_code, s.status_message,
        t.target AS backend, t.url AS backend_url, t.http_status,
        coalesce(t.tries, 0) AS tries, coalesce(t.rate_limited, 0) AS rate_limited,
        t.backend_s,
        coalesce(TRY_CAST(s.attributes->>'gen_ai.usage.input_tokens' AS BIGINT),
                 t.input_tokens) AS input_tokens,
        coalesce(TRY_CAST(s.attributes->>'gen_ai.usage.output_tokens' AS BIGINT),
                 t.output_tokens) AS output_tokens,
        coalesce(s.attributes->>'gen_ai.request.model', t.model) AS model,
        s.attributes->>'nemo.gym.model_request.id' AS request_id,
        s.is_open
    FROM served s
    LEFT JOIN tries t
        ON t.run_id = s.run_id AND t.trace_id = s.trace_id AND t.parent_span_id = s.span_id
    UNION ALL
    SELECT
        h.run_id, h.trace_id, h.span_id, 'http' AS source, 'HTTP ' || h.method, h.service,
        h.server_name, h.capture_key,
        h.start_ns, h.end_ns, CASE WHEN h.outcome = 'error' THEN 'ERROR' ELSE 'UNSET' END,
        h.error,
        h.target, h.url, h.http_status,
        1, CASE WHEN h.http_status IN (429, 502, 503, 504, 520) THEN 1 ELSE 0 END,
        h.duration_s, h.input_tokens, h.output_tokens, h.model,
        CAST(NULL AS VARCHAR), h.is_open
    FROM http_requests h
    WHERE h.model_endpoint AND NOT h.internal
      AND (run IS NULL OR h.run_id = run) AND (floor_ns IS NULL OR h.start_ns >= floor_ns)
      -- its parent is looked up among all the spans: a call that started before the floor
      -- still accounts for its tries after it
      AND NOT EXISTS (SELECT 1 FROM all_spans s
                      WHERE s.run_id = h.run_id AND s.trace_id = h.trace_id
                        AND s.span_id = h.parent_span_id
                        AND s.name IN ('gym.model.responses', 'gym.model.chat_completions',
                                       'gym.model.messages'))
)
SELECT
    run_id,
    trace_id,
    span_id,
    source,
    name,
    service,
    server_name,
    capture_key,
    CASE WHEN regexp_matches(capture_key, '-a[0-9]+$')
         THEN regexp_extract(capture_key, '^(.+)-a[0-9]+$', 1) ELSE capture_key END
        AS rollout_id,
    CASE WHEN capture_key IS NULL THEN NULL
         ELSE coalesce(TRY_CAST(regexp_extract(capture_key, '-a([0-9]+)$', 1) AS INTEGER), 0)
    END AS gym_attempt,
    start_ns,
    end_ns,
    (end_ns - start_ns) / 1e9 AS duration_s,
    CASE WHEN end_ns IS NULL THEN 'open'
         WHEN status_code = 'ERROR' OR http_status >= 400 THEN 'error'
         ELSE 'ok' END AS outcome,
    http_status,
    status_message AS error,
    backend,
    backend_url,
    tries,
    rate_limited,
    backend_s,
    input_tokens,
    output_tokens,
    model,
    request_id,
    is_open
FROM calls;

CREATE OR REPLACE VIEW model_calls AS
SELECT * FROM model_calls_of(NULL, NULL)
