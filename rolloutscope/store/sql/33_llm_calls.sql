-- llm_calls: one row per call to a generation model that an instrumented LLM client recorded on
-- a span of its own, without a URL (docs/dialects.md):
-- - an OpenTelemetry GenAI CLIENT span ('genai'), named '{gen_ai.operation.name}
--   {gen_ai.request.model}', of a generation operation (chat, text_completion,
--   generate_content: not embeddings, tools or agents), e.g. opentelemetry-instrumentation-openai-v2;
-- - an OpenInference span of kind LLM ('openinference': openinference.span.kind), e.g.
--   openinference-instrumentation-openai, an INTERNAL span named after the response type.
-- backend is server.address:server.port (GenAI; OpenInference records none). http_status is the
-- span's http.response.status_code where it has one, else the status the error message quotes:
-- the openai and anthropic SDKs raise 'Error code: 429 - ...' for an HTTP error answer, and both
-- instrumentations keep that text as the span's status message. error_type is error.type (GenAI:
-- the exception's class), else the exception event's exception.type (OpenInference).
-- model is the model asked for: gen_ai.request.model, else the model of OpenInference's
-- llm.invocation_parameters, else the answer's (gen_ai.response.model, llm.model_name).
-- input / output tokens: gen_ai.usage.input_tokens / output_tokens (or the older
-- gen_ai.usage.prompt_tokens / completion_tokens), llm.token_count.prompt / completion.
-- unread_attributes names each attribute read here whose value is not of its type (tokens sent
-- as "abc"): key=value as sent, ', '-separated; the span keeps it unchanged.
-- An OpenInference span is read where an OpenInference instrumentation made it: its scope (the
-- tracer's name) is openinference.instrumentation.<library>. The kind, URL and scope tests come
-- first, and DuckDB applies them as it scans the spans: it parses the JSON of the few spans they
-- keep. A test of every span's attributes text instead (LIKE '%openinference.span.kind%', or
-- one filter ORing the two dialects) cost 300-500 ms at 1M spans, these two branches ~10 ms.
-- llm_calls_of(run, floor_ns): the rows of run (NULL: every run) that start at or after
-- floor_ns (NULL: all), computed from there on (a call's exception event is inside it): a
-- reader of a long run's latest calls scans the spans after its floor only.
CREATE OR REPLACE MACRO llm_calls_of(run, floor_ns) AS TABLE
WITH call_spans AS (
    SELECT *, 'genai' AS source
    FROM all_spans
    WHERE kind = 'CLIENT' AND url IS NULL
      AND (attributes->>'gen_ai.operation.name')
          IN ('chat', 'text_completion', 'generate_content')
      AND coalesce(scope, '') NOT LIKE 'openinference.%'
      AND (run IS NULL OR run_id = run) AND (floor_ns IS NULL OR start_ns >= floor_ns)
    UNION ALL
    SELECT *, 'openinference' AS source
    FROM all_spans
    WHERE scope LIKE 'openinference.%' AND contains(attributes, 'openinference.span.kind')
      AND (attributes->>'openinference.span.kind') = 'LLM'
      AND (run IS NULL OR run_id = run) AND (floor_ns IS NULL OR start_ns >= floor_ns)
),
raised AS (  -- the exception event an OpenInference span records when its call raised
    SELECT run_id, trace_id, span_id, any_value(attributes->>'exception.type') AS exception_type
    FROM span_events
    WHERE name = 'exception'
      AND (run IS NULL OR run_id = run) AND (floor_ns IS NULL OR ts_ns >= floor_ns)
      AND span_id IN (SELECT span_id FROM call_spans WHERE status_code = 'ERROR')
    GROUP BY run_id, trace_id, span_id
),
read AS (
    SELECT s.*,
           s.attributes->>'gen_ai.usage.input_tokens' AS in_genai,
           s.attributes->>'gen_ai.usage.output_tokens' AS out_genai,
           s.attributes->>'gen_ai.usage.prompt_tokens' AS in_old,
           s.attributes->>'gen_ai.usage.completion_tokens' AS out_old,
           s.attributes->>'llm.token_count.prompt' AS in_oi,
           s.attributes->>'llm.token_count.completion' AS out_oi,
           r.exception_type
    FROM call_spans s
    LEFT JOIN raised r
        ON r.run_id = s.run_id AND r.trace_id = s.trace_id AND r.span_id = s.span_id
)
SELECT
    run_id,
    trace_id,
    span_id,
    parent_span_id,
    source,
    name,
    service,
    coalesce(attributes->>'nemo.gym.server.name', resource->>'nemo.gym.server.name')
        AS server_name,
    rollout_id AS capture_key,
    start_ns,
    end_ns,
    status_code,
    status_message,
    server_authority AS backend,
    coalesce(http_status,
             TRY_CAST(regexp_extract(status_message, 'Error code: ([0-9]{3})\b', 1) AS INTEGER))
        AS http_status,
    coalesce(attributes->>'error.type', exception_type) AS error_type,
    coalesce(attributes->>'gen_ai.provider.name', attributes->>'gen_ai.system',
             attributes->>'llm.provider', attributes->>'llm.system') AS provider,
    coalesce(attributes->>'gen_ai.request.model',
             json_extract_string(attributes->>'llm.invocation_parameters', '$.model'),
             attributes->>'gen_ai.response.model', attributes->>'llm.model_name') AS model,
    attributes->>'gen_ai.response.id' AS request_id,
    coalesce(TRY_CAST(in_genai AS BIGINT), TRY_CAST(in_old AS BIGINT), TRY_CAST(in_oi AS BIGINT))
        AS input_tokens,
    coalesce(TRY_CAST(out_genai AS BIGINT), TRY_CAST(out_old AS BIGINT),
             TRY_CAST(out_oi AS BIGINT)) AS output_tokens,
    nullif(concat_ws(', ',
        CASE WHEN in_genai IS NOT NULL AND TRY_CAST(in_genai AS BIGINT) IS NULL
             THEN 'gen_ai.usage.input_tokens=' || (attributes->'gen_ai.usage.input_tokens') END,
        CASE WHEN out_genai IS NOT NULL AND TRY_CAST(out_genai AS BIGINT) IS NULL
             THEN 'gen_ai.usage.output_tokens=' || (attributes->'gen_ai.usage.output_tokens') END,
        CASE WHEN in_old IS NOT NULL AND TRY_CAST(in_old AS BIGINT) IS NULL
             THEN 'gen_ai.usage.prompt_tokens=' || (attributes->'gen_ai.usage.prompt_tokens') END,
        CASE WHEN out_old IS NOT NULL AND TRY_CAST(out_old AS BIGINT) IS NULL
             THEN 'gen_ai.usage.completion_tokens='
                  || (attributes->'gen_ai.usage.completion_tokens') END,
        CASE WHEN in_oi IS NOT NULL AND TRY_CAST(in_oi AS BIGINT) IS NULL
             THEN 'llm.token_count.prompt=' || (attributes->'llm.token_count.prompt') END,
        CASE WHEN out_oi IS NOT NULL AND TRY_CAST(out_oi AS BIGINT) IS NULL
             THEN 'llm.token_count.completion=' || (attributes->'llm.token_count.completion')
        END), '') AS unread_attributes,
    is_open
FROM read;

CREATE OR REPLACE VIEW llm_calls AS
SELECT * FROM llm_calls_of(NULL, NULL)
