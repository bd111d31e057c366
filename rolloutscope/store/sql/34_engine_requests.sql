-- engine_requests: one row per request a generation engine served, as the engine records it:
-- vLLM's llm_request SERVER span (vllm serve --otlp-traces-endpoint), which starts at the
-- request's arrival and is parented by the caller's traceparent (the HTTP try, or the client's
-- call span, that sent it: parent_span_id).
-- engine_service is the engine's service.name (OTEL_SERVICE_NAME), engine_instance the
-- vllm.process_id vLLM's tracer puts on its resource, else its service.instance.id; host its
-- host.name. request_id is gen_ai.request.id (the id the engine was given or made);
-- prompt_tokens / completion_tokens gen_ai.usage.prompt_tokens / completion_tokens; the
-- latencies, in seconds, gen_ai.latency.time_in_queue (queue_s), .time_to_first_token (ttft_s),
-- .time_in_model_prefill (prefill_s), .time_in_model_decode (decode_s),
-- .time_in_model_inference (inference_s) and .e2e (e2e_s); finish_reason the first of
-- gen_ai.response.finish_reasons where the engine sets it (vLLM 0.34 does not).
-- A value of the wrong type (a latency sent as text that is not a number) reads as NULL here;
-- the span keeps it as sent.
CREATE OR REPLACE VIEW engine_requests AS
SELECT
    run_id,
    trace_id,
    span_id,
    parent_span_id,
    service AS engine_service,
    coalesce(resource->>'vllm.process_id', resource->>'service.instance.id') AS engine_instance,
    resource->>'host.name' AS host,
    attributes->>'gen_ai.request.id' AS request_id,
    start_ns,
    end_ns,
    (end_ns - start_ns) / 1e9 AS duration_s,
    TRY_CAST(attributes->>'gen_ai.latency.time_in_queue' AS DOUBLE) AS queue_s,
    TRY_CAST(attributes->>'gen_ai.latency.time_to_first_token' AS DOUBLE) AS ttft_s,
    TRY_CAST(attributes->>'gen_ai.latency.time_in_model_prefill' AS DOUBLE) AS prefill_s,
    TRY_CAST(attributes->>'gen_ai.latency.time_in_model_decode' AS DOUBLE) AS decode_s,
    TRY_CAST(attributes->>'gen_ai.latency.time_in_model_inference' AS DOUBLE) AS inference_s,
    TRY_CAST(attributes->>'gen_ai.latency.e2e' AS DOUBLE) AS e2e_s,
    TRY_CAST(attributes->>'gen_ai.usage.prompt_tokens' AS BIGINT) AS prompt_tokens,
    TRY_CAST(attributes->>'gen_ai.usage.completion_tokens' AS BIGINT) AS completion_tokens,
    TRY_CAST(attributes->>'gen_ai.request.max_tokens' AS BIGINT) AS max_tokens,
    coalesce(attributes->>'$."gen_ai.response.finish_reasons"[0]',
             attributes->>'gen_ai.response.finish_reasons') AS finish_reason,
    is_open
FROM all_spans
WHERE name = 'llm_request' AND kind = 'SERVER'
