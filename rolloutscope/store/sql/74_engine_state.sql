-- engine_state: each generation engine as it sees itself, one row per engine and scrape of its
-- Prometheus /metrics (rolloutscope serve --scrape; collectors/scrape.py, the names in
-- rolloutscope/dialects/vllm_metrics.py). An engine is one (address, url, model_name,
-- engine_idx): address is the scraped server's host:port (the metrics row's service), url the
-- URL read (resource url.full), model_name and engine_idx vLLM's model_name and engine labels
-- (engine_idx: the engine core's index behind one API server, one per data-parallel rank).
-- running / waiting: vllm:num_requests_running / vllm:num_requests_waiting at the scrape;
-- kv_cache_usage: vllm:kv_cache_usage_perc (1 = full); preemptions: the vllm:num_preemptions
-- counter, preemptions_delta its rise since the engine's previous scrape and preemption_rate
-- that per second; finished: requests finished so far (vllm:e2e_request_latency_seconds' count),
-- finished_delta those since the previous scrape; queue_s / e2e_s: the seconds finished
-- requests spent waiting (vllm:request_queue_time_seconds' sum) and end to end
-- (vllm:e2e_request_latency_seconds' sum), and queue_share the part of the end-to-end time of
-- the requests finished since the previous scrape that was queueing. A counter that went down
-- (the engine restarted) counts from zero again. The first scrape of an engine has no deltas.
CREATE OR REPLACE VIEW engine_state AS
WITH points AS (
    SELECT
        run_id,
        service AS address,
        resource->>'url.full' AS url,
        attributes->>'model_name' AS model_name,
        attributes->>'engine' AS engine_idx,
        ts_ns,
        max(value) FILTER (WHERE name = 'vllm:num_requests_running') AS running,
        max(value) FILTER (WHERE name = 'vllm:num_requests_waiting') AS waiting,
        max(value) FILTER (WHERE name = 'vllm:kv_cache_usage_perc') AS kv_cache_usage,
        max(value) FILTER (WHERE name = 'vllm:num_preemptions') AS preemptions,
        max(count) FILTER (WHERE name = 'vllm:e2e_request_latency_seconds') AS finished,
        max(sum) FILTER (WHERE name = 'vllm:e2e_request_latency_seconds') AS e2e_s,
        max(sum) FILTER (WHERE name = 'vllm:request_queue_time_seconds') AS queue_s
    FROM metrics
    WHERE name IN ('vllm:num_requests_running', 'vllm:num_requests_waiting',
                   'vllm:kv_cache_usage_perc', 'vllm:num_preemptions',
                   'vllm:e2e_request_latency_seconds', 'vllm:request_queue_time_seconds')
    GROUP BY ALL
),
stepped AS (
    SELECT *,
           lag(ts_ns) OVER w AS prev_ns,
           lag(preemptions) OVER w AS prev_preemptions,
           lag(finished) OVER w AS prev_finished,
           lag(e2e_s) OVER w AS prev_e2e_s,
           lag(queue_s) OVER w AS prev_queue_s
    FROM points
    WINDOW w AS (PARTITION BY run_id, address, url, model_name, engine_idx ORDER BY ts_ns)
),
deltas AS (
    SELECT *,
           CASE WHEN preemptions >= prev_preemptions THEN preemptions - prev_preemptions
                WHEN preemptions < prev_preemptions THEN preemptions END AS preemptions_delta,
           CASE WHEN finished >= prev_finished THEN finished - prev_finished
                WHEN finished < prev_finished THEN finished END AS finished_delta,
           CASE WHEN finished >= prev_finished THEN e2e_s - prev_e2e_s
                WHEN finished < prev_finished THEN e2e_s END AS e2e_s_delta,
           CASE WHEN finished >= prev_finished THEN queue_s - prev_queue_s
                WHEN finished < prev_finished THEN queue_s END AS queue_s_delta
    FROM stepped
)
SELECT
    run_id,
    'engine ' || address || coalesce(' #' || engine_idx, '') AS engine,
    address,
    url,
    model_name,
    engine_idx,
    ts_ns,
    (ts_ns - prev_ns) / 1e9 AS dt_s,
    running,
    waiting,
    kv_cache_usage,
    preemptions,
    preemptions_delta,
    preemptions_delta / ((ts_ns - prev_ns) / 1e9) AS preemption_rate,
    finished,
    finished_delta,
    queue_s,
    e2e_s,
    CASE WHEN e2e_s_delta > 0 THEN least(1.0, greatest(0.0, queue_s_delta / e2e_s_delta))
         END AS queue_share
FROM deltas
