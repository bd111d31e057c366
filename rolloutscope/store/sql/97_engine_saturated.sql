-- engine_saturated (P17 in docs/domain/incidents.md): an engine whose requests spend most of
-- their time queued. At each scrape, over the engine_saturation_window_s before it (from the
-- engine's latest scrape at least that old), the requests finished in the window spent at least
-- engine_saturated_queue_share of their end-to-end time waiting (the rise of
-- vllm:request_queue_time_seconds' sum over the rise of vllm:e2e_request_latency_seconds' sum);
-- one incident per stretch of such scrapes, from the first one's window start to the last one.
-- A window over a restart (a count that went down) is not judged. end_ns is NULL while the
-- engine's latest scrape is still saturated. Evidence: the stays of the shard(s) it serves
-- (shard_engines) in that stretch, which the summary names with their states.
CREATE OR REPLACE VIEW engine_saturated AS
WITH scrapes AS (
    SELECT e.*, t.engine_saturated_queue_share AS share_at_least,
           e.ts_ns - CAST(t.engine_saturation_window_s * 1e9 AS BIGINT) AS window_ns
    FROM engine_state e
    JOIN run_thresholds t ON t.run_id = e.run_id
),
windowed AS (
    SELECT e.run_id, e.engine, e.address, e.url, e.model_name, e.ts_ns,
           b.ts_ns AS window_start_ns,
           e.finished - b.finished AS finished,
           e.queue_s - b.queue_s AS queue_s,
           e.e2e_s - b.e2e_s AS e2e_s,
           e.share_at_least
    FROM scrapes e
    ASOF JOIN engine_state b
        ON b.run_id = e.run_id AND b.engine = e.engine AND b.url = e.url
       AND b.model_name IS NOT DISTINCT FROM e.model_name AND b.ts_ns <= e.window_ns
),
flagged AS (
    SELECT *,
           coalesce(finished > 0 AND e2e_s > 0 AND queue_s / e2e_s >= share_at_least, false)
               AS saturated,
           max(ts_ns) OVER (PARTITION BY run_id, engine, url, model_name) AS latest_ns
    FROM windowed
),
islands AS (
    SELECT *,
           sum(CASE WHEN saturated THEN 0 ELSE 1 END)
               OVER (PARTITION BY run_id, engine, url, model_name ORDER BY ts_ns) AS stretch
    FROM flagged
),
stretches AS (
    SELECT run_id, engine, address, url, model_name, stretch,
           min(window_start_ns) AS start_ns, max(ts_ns) AS last_ns,
           any_value(latest_ns) AS latest_ns, count(*) AS scrapes,
           max(queue_s / e2e_s) AS peak_share, min(queue_s / e2e_s) AS low_share,
           arg_max(finished, queue_s / e2e_s) AS finished
    FROM islands
    WHERE saturated
    GROUP BY run_id, engine, address, url, model_name, stretch
),
-- what fleet health said of the shard(s) served by this engine meanwhile (shard_engines)
fleet AS (
    SELECT s.run_id, s.engine, s.url, s.model_name, s.stretch,
           list(h.span_id ORDER BY h.start_ns)[1:5] AS evidence,
           string_agg(DISTINCT 'shard ' || h.shard_idx || ' ' || h.state, ', ') AS states
    FROM stretches s
    JOIN shard_engines h
        ON h.run_id = s.run_id AND h.address = lower(s.address)
       AND h.start_ns <= s.last_ns AND coalesce(h.end_ns, s.last_ns) >= s.start_ns
    GROUP BY s.run_id, s.engine, s.url, s.model_name, s.stretch
)
SELECT
    s.run_id,
    'p17-' || substr(md5(s.run_id || s.engine || s.url || coalesce(s.model_name, '')
                         || s.start_ns), 1, 9) AS incident_id,
    'engine_saturated' AS kind,
    'warning' AS severity,
    s.start_ns,
    CASE WHEN s.last_ns < s.latest_ns THEN s.last_ns END AS end_ns,
    s.engine AS subject,
    format('{} ({}): requests spent {:.0f}-{:.0f}% of their end-to-end time queued over {:.0f} s '
           'windows, from {:.1f} s to {:.1f} s (at the peak, {} request(s) finished in the '
           'window).',
           'E' || s.engine[2:], coalesce(s.model_name, 'no model name'), 100 * s.low_share,
           100 * s.peak_share, t.engine_saturation_window_s, (s.start_ns - t.origin_ns) / 1e9,
           (s.last_ns - t.origin_ns) / 1e9, s.finished)
        || coalesce(' Fleet health meanwhile: ' || f.states || '.', '') AS summary,
    coalesce(f.evidence, CAST([] AS VARCHAR[])) AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM stretches s
JOIN run_thresholds t ON t.run_id = s.run_id
LEFT JOIN fleet f
    ON f.run_id = s.run_id AND f.engine = s.engine AND f.url = s.url
   AND f.model_name IS NOT DISTINCT FROM s.model_name AND f.stretch = s.stretch
