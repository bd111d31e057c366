-- model_calls: one row per call to a generation model, whatever recorded it (source; which
-- dialect feeds which column: docs/dialects.md):
-- - 'gym': a Gym model server's gym.model.responses / chat_completions / messages span (one call
--   it served), with the backend it forwarded the call to: the HTTP tries under that span
--   (backend, last try's status, tries, rate-limited tries);
-- - 'genai' / 'openinference': an instrumented LLM client's call span (llm_calls), with the HTTP
--   tries under it where the client's HTTP library is traced too (then backend, backend_url,
--   tries and the last try's status come from them, as for Gym); a call span under another
--   call span is that call's, not a row of its own;
-- - 'http': an outbound HTTP request to a generation route (http_requests.model_endpoint) that
--   no call span accounts for and that leaves the traced deployment (not internal): e.g. a
--   model server traced without the model_call span group, or any other client.
-- Gym's agent -> model-server hop is internal (the model server's own span is the call), so one
-- call is one row. capture_key is the Gym rollout (rid or rid-aN), rollout_id and gym_attempt
-- its parts. outcome: ok | error (a failed span or a status >= 400) | open. http_status: the
-- last try's, else what the call span says (llm_calls.http_status). error_type and provider:
-- the call span's (llm_calls; Gym's spans carry neither). backend: the last try's scheme://host:port, else the
-- call span's server.address:server.port. unread_attributes: the attributes of the call whose
-- value is not of its type (llm_calls).
-- The engine's side, where the engine's own record of the call is in the same trace
-- (engine_requests: vLLM's llm_request, a child of the call span or of one of its tries; the
-- latest such): engine_service / engine_instance say which engine served it, engine_request_id
-- the engine's id, engine_queue_s, engine_ttft_s, engine_prefill_s, engine_decode_s,
-- engine_e2e_s its latencies (s), engine_prompt_tokens / engine_completion_tokens its counts,
-- engine_finish_reason why it stopped.
-- model_calls_of(run, floor_ns): the rows of run that start at or after floor_ns (NULL: every
-- run, the whole run), computed from there on: a dashboard reading the latest calls of a long
-- run scans the spans after its floor, not the run (at 10M spans 0.8 s instead of 4.8 s). A
-- row's parent (the call an HTTP try or engine request is under) starts before it: parents are
-- looked up from ten minutes before the floor, so a floored read scans no span older than
-- that, and a call longer than ten minutes that started before the floor has its later tries
-- listed as 'http' rows of their own there (never in the view).
CREATE OR REPLACE MACRO model_calls_of(run, floor_ns) AS TABLE
WITH served AS (
    SELECT * FROM all_spans
    WHERE name IN ('gym.model.responses', 'gym.model.chat_completions', 'gym.model.messages')
      AND (run IS NULL OR run_id = run) AND (floor_ns IS NULL OR start_ns >= floor_ns)
),
-- client call spans that no other call span holds (a GenAI span under an OpenInference one
-- is one call)
llm AS (
    SELECT l.* FROM llm_calls_of(run, floor_ns) l
    WHERE NOT EXISTS (SELECT 1 FROM llm_calls_of(run, floor_ns - 600000000000) p
                      WHERE p.run_id = l.run_id AND p.trace_id = l.trace_id
                        AND p.span_id = l.parent_span_id)
      AND NOT EXISTS (SELECT 1 FROM served p
                      WHERE p.run_id = l.run_id AND p.trace_id = l.trace_id
                        AND p.span_id = l.parent_span_id)
),
callers AS (
    SELECT run_id, trace_id, span_id FROM served
    UNION ALL
    SELECT run_id, trace_id, span_id FROM llm
),
-- the engine's record of a call: an engine request under the call's span (an http row's span
-- included), or under one of its HTTP tries; the latest one
engine AS (
    SELECT e.*, e.parent_span_id AS call_span_id
    FROM engine_requests e
    WHERE (run IS NULL OR e.run_id = run) AND (floor_ns IS NULL OR e.start_ns >= floor_ns)
    UNION ALL
    SELECT e.*, h.parent_span_id AS call_span_id
    FROM engine_requests e
    JOIN all_spans h  -- an HTTP try: a CLIENT span with a URL
        ON h.run_id = e.run_id AND h.trace_id = e.trace_id AND h.span_id = e.parent_span_id
       AND h.kind = 'CLIENT' AND h.url IS NOT NULL
       AND (floor_ns IS NULL OR h.start_ns >= floor_ns - 600000000000)
    WHERE (run IS NULL OR e.run_id = run) AND (floor_ns IS NULL OR e.start_ns >= floor_ns)
),
engine_of AS (
    SELECT * FROM engine
    QUALIFY row_number() OVER (PARTITION BY run_id, trace_id, call_span_id
                               ORDER BY start_ns DESC, span_id) = 1
),
tries AS (  -- backend tries under a call: same process, so the parent link holds
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
    -- a try starts inside its call: the floor bounds the tries too, and the scan skips the rest
    FROM http_requests_of(run, floor_ns) h
    JOIN callers s ON s.run_id = h.run_id AND s.trace_id = h.trace_id
                  AND s.span_id = h.parent_span_id
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
        s.is_open,
        s.parent_span_id,
        -- Gym's spans carry no provider or error.type; its token attributes are read above
        -- (the same expressions, computed once)
        CAST(NULL AS VARCHAR) AS provider,
        CAST(NULL AS VARCHAR) AS error_type,
        nullif(concat_ws(', ',
            CASE WHEN s.attributes->>'gen_ai.usage.input_tokens' IS NOT NULL
                      AND TRY_CAST(s.attributes->>'gen_ai.usage.input_tokens' AS BIGINT) IS NULL
                 THEN 'gen_ai.usage.input_tokens='
                      || (s.attributes->'gen_ai.usage.input_tokens') END,
            CASE WHEN s.attributes->>'gen_ai.usage.output_tokens' IS NOT NULL
                      AND TRY_CAST(s.attributes->>'gen_ai.usage.output_tokens' AS BIGINT) IS NULL
                 THEN 'gen_ai.usage.output_tokens='
                      || (s.attributes->'gen_ai.usage.output_tokens') END), '')
            AS unread_attributes
    FROM served s
    LEFT JOIN tries t
        ON t.run_id = s.run_id AND t.trace_id = s.trace_id AND t.parent_span_id = s.span_id
    UNION ALL
    SELECT
        l.run_id, l.trace_id, l.span_id, l.source, l.name, l.service, l.server_name,
        l.capture_key,
        l.start_ns, l.end_ns, l.status_code, l.status_message,
        coalesce(t.target, l.backend), t.url, coalesce(t.http_status, l.http_status),
        coalesce(t.tries, 0),
        coalesce(t.rate_limited,
                 CASE WHEN l.http_status IN (429, 502, 503, 504, 520) THEN 1 ELSE 0 END),
        t.backend_s,
        coalesce(l.input_tokens, t.input_tokens), coalesce(l.output_tokens, t.output_tokens),
        coalesce(l.model, t.model), l.request_id, l.is_open,
        l.parent_span_id, l.provider, l.error_type, l.unread_attributes
    FROM llm l
    LEFT JOIN tries t
        ON t.run_id = l.run_id AND t.trace_id = l.trace_id AND t.parent_span_id = l.span_id
    UNION ALL
    SELECT
        h.run_id, h.trace_id, h.span_id, 'http' AS source, 'HTTP ' || h.method, h.service,
        h.server_name, h.capture_key,
        h.start_ns, h.end_ns, CASE WHEN h.outcome = 'error' THEN 'ERROR' ELSE 'UNSET' END,
        h.error,
        h.target, h.url, h.http_status,
        1, CASE WHEN h.http_status IN (429, 502, 503, 504, 520) THEN 1 ELSE 0 END,
        h.duration_s, h.input_tokens, h.output_tokens, h.model,
        CAST(NULL AS VARCHAR), h.is_open,
        h.parent_span_id, CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR)
    FROM http_requests_of(run, floor_ns) h
    WHERE h.model_endpoint AND NOT h.internal
      -- its parent is looked up from ten minutes before the floor: a call that started
      -- before the floor still accounts for its tries after it
      AND NOT EXISTS (SELECT 1 FROM all_spans s
                      WHERE s.run_id = h.run_id AND s.trace_id = h.trace_id
                        AND s.span_id = h.parent_span_id
                        AND s.name IN ('gym.model.responses', 'gym.model.chat_completions',
                                       'gym.model.messages')
                        AND (floor_ns IS NULL OR s.start_ns >= floor_ns - 600000000000))
      AND NOT EXISTS (SELECT 1 FROM llm_calls_of(run, floor_ns - 600000000000) s
                      WHERE s.run_id = h.run_id AND s.trace_id = h.trace_id
                        AND s.span_id = h.parent_span_id)
)
SELECT
    c.run_id,
    c.trace_id,
    c.span_id,
    c.source,
    c.name,
    c.service,
    c.server_name,
    c.capture_key,
    CASE WHEN regexp_matches(c.capture_key, '-a[0-9]+$')
         THEN regexp_extract(c.capture_key, '^(.+)-a[0-9]+$', 1) ELSE c.capture_key END
        AS rollout_id,
    CASE WHEN c.capture_key IS NULL THEN NULL
         ELSE coalesce(TRY_CAST(regexp_extract(c.capture_key, '-a([0-9]+)$', 1) AS INTEGER), 0)
    END AS gym_attempt,
    c.start_ns,
    c.end_ns,
    (c.end_ns - c.start_ns) / 1e9 AS duration_s,
    CASE WHEN c.end_ns IS NULL THEN 'open'
         WHEN c.status_code = 'ERROR' OR c.http_status >= 400 THEN 'error'
         ELSE 'ok' END AS outcome,
    c.http_status,
    c.status_message AS error,
    c.backend,
    c.backend_url,
    c.tries,
    c.rate_limited,
    c.backend_s,
    c.input_tokens,
    c.output_tokens,
    c.model,
    c.request_id,
    c.is_open,
    c.parent_span_id,
    c.provider,
    c.error_type,
    c.unread_attributes,
    e.engine_service,
    e.engine_instance,
    e.request_id AS engine_request_id,
    e.queue_s AS engine_queue_s,
    e.ttft_s AS engine_ttft_s,
    e.prefill_s AS engine_prefill_s,
    e.decode_s AS engine_decode_s,
    e.e2e_s AS engine_e2e_s,
    e.prompt_tokens AS engine_prompt_tokens,
    e.completion_tokens AS engine_completion_tokens,
    e.finish_reason AS engine_finish_reason
FROM calls c
LEFT JOIN engine_of e
    ON e.run_id = c.run_id AND e.trace_id = c.trace_id AND e.call_span_id = c.span_id;

CREATE OR REPLACE VIEW model_calls AS
SELECT * FROM model_calls_of(NULL, NULL)
