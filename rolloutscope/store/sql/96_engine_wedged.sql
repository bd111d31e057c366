-- engine_wedged (P16 in docs/domain/incidents.md): an engine that, by its own /metrics, holds
-- requests (running + waiting > 0) and finishes none (its vllm:e2e_request_latency_seconds count
-- stands still) for at least engine_wedged_s, whatever the fleet's probes say of it. Read from
-- engine_state; one incident per stretch, from the last scrape at which something had finished
-- (or nothing was held) to the last scrape that still found it stuck. end_ns is NULL while the
-- engine's latest scrape is still stuck. Evidence: the stays of the shard(s) it serves
-- (shard_engines) in that stretch, which the summary names with their states.
CREATE OR REPLACE VIEW engine_wedged AS
WITH flagged AS (
    SELECT *,
           coalesce(running, 0) + coalesce(waiting, 0) > 0 AND finished_delta = 0 AS stuck
    FROM engine_state
),
islands AS (
    SELECT *,
           -- a scrape that is not stuck opens the next stretch; it is that stretch's start
           sum(CASE WHEN stuck THEN 0 ELSE 1 END)
               OVER (PARTITION BY run_id, engine, url, model_name ORDER BY ts_ns) AS stretch,
           max(ts_ns) OVER (PARTITION BY run_id, engine, url, model_name) AS latest_ns
    FROM flagged
),
stretches AS (
    SELECT run_id, engine, address, url, model_name, stretch,
           min(ts_ns) AS start_ns,
           max(ts_ns) FILTER (WHERE stuck) AS last_ns,
           any_value(latest_ns) AS latest_ns,
           count(*) FILTER (WHERE stuck) AS scrapes,
           max(running) FILTER (WHERE stuck) AS running,
           max(waiting) FILTER (WHERE stuck) AS waiting
    FROM islands
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
    'p16-' || substr(md5(s.run_id || s.engine || s.url || coalesce(s.model_name, '')
                         || s.start_ns), 1, 9) AS incident_id,
    'engine_wedged' AS kind,
    'critical' AS severity,
    s.start_ns,
    CASE WHEN s.last_ns < s.latest_ns THEN s.last_ns END AS end_ns,
    s.engine AS subject,
    format('{} ({}) held up to {:.0f} running and {:.0f} waiting request(s) and finished none '
           'for {:.0f} s from {:.1f} s ({} scrape(s) of {}){}.',
           'E' || s.engine[2:], coalesce(s.model_name, 'no model name'), s.running, s.waiting,
           (s.last_ns - s.start_ns) / 1e9, (s.start_ns - t.origin_ns) / 1e9, s.scrapes, s.url,
           CASE WHEN s.last_ns < s.latest_ns THEN '' ELSE '; it still finishes none' END
           || coalesce('; fleet health meanwhile: ' || f.states, '')) AS summary,
    coalesce(f.evidence, CAST([] AS VARCHAR[])) AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM stretches s
JOIN run_thresholds t ON t.run_id = s.run_id
LEFT JOIN fleet f
    ON f.run_id = s.run_id AND f.engine = s.engine AND f.url = s.url
   AND f.model_name IS NOT DISTINCT FROM s.model_name AND f.stretch = s.stretch
WHERE s.scrapes > 0 AND s.last_ns - s.start_ns >= t.engine_wedged_s * 1e9
