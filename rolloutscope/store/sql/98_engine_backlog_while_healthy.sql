-- engine_backlog_while_healthy (P18 in docs/domain/incidents.md): fleet health calls a shard
-- healthy while its engine's own queue grows. A shard and its engine join on the engine's
-- address (shard_engines.address = engine_state.address: the host:port of the shard's
-- backend_url and of the URL scraped). A growing stretch is a run of scrapes at
-- which vllm:num_requests_waiting is above zero and no lower than at the scrape before, from the
-- scrape before the first of them to the last at which waiting rose (a queue that jumped once
-- and then stood still is not growing); it counts when it overlapped a stay of the shard in
-- state healthy by at least engine_backlog_s. One incident per stretch (the
-- longest overlap when several shards name the engine); evidence is the shard's healthy stay.
CREATE OR REPLACE VIEW engine_backlog_while_healthy AS
WITH stepped AS (
    SELECT *,
           lag(waiting) OVER (PARTITION BY run_id, engine, url, model_name ORDER BY ts_ns)
               AS prev_waiting
    FROM engine_state
),
islands AS (
    SELECT *,
           waiting > 0 AND waiting >= prev_waiting AS growing,
           sum(CASE WHEN waiting > 0 AND waiting >= prev_waiting THEN 0 ELSE 1 END)
               OVER (PARTITION BY run_id, engine, url, model_name ORDER BY ts_ns) AS stretch
    FROM stepped
),
stretches AS (
    SELECT run_id, engine, address, url, model_name, stretch,
           min(ts_ns) AS start_ns,
           max(ts_ns) FILTER (WHERE waiting > prev_waiting) AS end_ns,
           arg_min(waiting, ts_ns) AS waiting_from,
           max(waiting) AS waiting_to,
           count(*) FILTER (WHERE growing) AS scrapes
    FROM islands
    GROUP BY run_id, engine, address, url, model_name, stretch
    HAVING count(*) FILTER (WHERE waiting > prev_waiting) > 0
),
shards AS (
    SELECT * FROM shard_engines WHERE state = 'healthy'
),
overlapping AS (
    SELECT g.*, s.shard_idx, s.span_id, s.backend_url,
           least(g.end_ns, coalesce(s.end_ns, g.end_ns)) - greatest(g.start_ns, s.start_ns)
               AS overlap_ns
    FROM stretches g
    JOIN shards s
        ON s.run_id = g.run_id AND s.address = lower(g.address)
       AND s.start_ns < g.end_ns AND coalesce(s.end_ns, g.end_ns) > g.start_ns
),
longest AS (
    SELECT run_id, engine, url, model_name, stretch,
           arg_max(shard_idx, overlap_ns) AS shard_idx,
           arg_max(span_id, overlap_ns) AS span_id,
           arg_max(backend_url, overlap_ns) AS backend_url,
           max(overlap_ns) AS overlap_ns,
           any_value(start_ns) AS start_ns, any_value(end_ns) AS end_ns,
           any_value(waiting_from) AS waiting_from, any_value(waiting_to) AS waiting_to
    FROM overlapping
    GROUP BY run_id, engine, url, model_name, stretch
)
SELECT
    l.run_id,
    'p18-' || substr(md5(l.run_id || l.engine || l.url || coalesce(l.model_name, '')
                         || l.start_ns), 1, 9) AS incident_id,
    'engine_backlog_while_healthy' AS kind,
    'warning' AS severity,
    l.start_ns,
    l.end_ns,
    'shard ' || l.shard_idx AS subject,
    format('Fleet health called shard {} ({}) healthy while {} ({}) had its waiting requests grow '
           'from {:.0f} to {:.0f} over {:.0f} s, from {:.1f} s.',
           l.shard_idx, l.backend_url, l.engine, coalesce(l.model_name, 'no model name'),
           l.waiting_from, l.waiting_to, (l.end_ns - l.start_ns) / 1e9,
           (l.start_ns - t.origin_ns) / 1e9) AS summary,
    [l.span_id] AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM longest l
JOIN run_thresholds t ON t.run_id = l.run_id
WHERE l.waiting_to > l.waiting_from AND l.overlap_ns >= t.engine_backlog_s * 1e9
