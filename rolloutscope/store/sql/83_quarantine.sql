-- quarantine (P4 in docs/domain/incidents.md; NVIDIA-NeMo/RL #3590): a generation shard left the
-- serving set for dead. Reports what moved it (probe or reported failures, with the last error),
-- the time from the fault to the quarantine — from the injected fault when a replay recorded one,
-- else from the shard's first failure (the start of its suspect stay) — and the serving-backends
-- drop the next router membership push made (N -> N-1). A run without push events (an imported
-- logger's metrics) reads that drop from router/serving_backends; a run without shard stays at all
-- (metrics only) is quarantined where gen_fleet/shards/dead rises, its subject the fleet, timed
-- from the gen_fleet/shards/suspect rise before it when the samples show one.
CREATE OR REPLACE VIEW quarantine AS
WITH dead AS (
    SELECT s.*, t.origin_ns AS origin_ns
    FROM shard_states s
    JOIN run_thresholds t ON t.run_id = s.run_id
    WHERE s.state = 'dead' AND coalesce(s.previous_state, 'healthy') IN ('healthy', 'suspect')
),
pushes AS (
    SELECT run_id, ts_ns, span_id,
           TRY_CAST(attributes->>'nemo.rl.router.serving_backends.count' AS INTEGER) AS serving,
           lag(TRY_CAST(attributes->>'nemo.rl.router.serving_backends.count' AS INTEGER))
               OVER (PARTITION BY run_id ORDER BY ts_ns) AS serving_before
    FROM span_events
    WHERE name = 'rl.router.membership_push'
    UNION ALL
    SELECT run_id, ts_ns, CAST(NULL AS VARCHAR), CAST(value AS INTEGER),
           CAST(lag(value) OVER (PARTITION BY run_id ORDER BY ts_ns) AS INTEGER)
    FROM metrics m
    WHERE name = 'router/serving_backends'
      AND NOT EXISTS (SELECT 1 FROM span_events e
                      WHERE e.run_id = m.run_id AND e.name = 'rl.router.membership_push')
),
fleet_counts AS (
    SELECT run_id, name, ts_ns, value,
           lag(value) OVER (PARTITION BY run_id, name ORDER BY ts_ns) AS value_before,
           lag(ts_ns) OVER (PARTITION BY run_id, name ORDER BY ts_ns) AS ts_before
    FROM metrics m
    WHERE name IN ('gen_fleet/shards/dead', 'gen_fleet/shards/suspect',
                   'gen_fleet/serving_shards')
      AND NOT EXISTS (SELECT 1 FROM shard_states s WHERE s.run_id = m.run_id)
),
dead_rises AS (
    SELECT d.run_id, d.ts_ns, d.value AS dead, coalesce(d.value_before, 0) AS dead_before,
           d.ts_before,
           (SELECT max(s.ts_ns) FROM fleet_counts s
            WHERE s.run_id = d.run_id AND s.name = 'gen_fleet/shards/suspect'
              AND s.value > coalesce(s.value_before, 0) AND s.ts_ns <= d.ts_ns
              AND (d.ts_before IS NULL OR s.ts_ns > (
                  SELECT coalesce(max(p.ts_ns), 0) FROM fleet_counts p
                  WHERE p.run_id = d.run_id AND p.name = 'gen_fleet/shards/dead'
                    AND p.ts_ns < d.ts_ns AND p.value > coalesce(p.value_before, 0))))
               AS suspect_ns,
           (SELECT arg_max(struct_pack(n := f.value, b := f.value_before), f.ts_ns)
            FROM fleet_counts f
            WHERE f.run_id = d.run_id AND f.name = 'gen_fleet/serving_shards'
              AND f.ts_ns <= d.ts_ns) AS serving,
           (SELECT arg_min(struct_pack(ts := p.ts_ns, n := p.serving, b := p.serving_before),
                           p.ts_ns)
            FROM pushes p
            WHERE p.run_id = d.run_id AND p.ts_ns >= d.ts_ns
              AND p.serving < p.serving_before) AS drop_push
    FROM fleet_counts d
    WHERE d.name = 'gen_fleet/shards/dead' AND d.value > coalesce(d.value_before, 0)
),
marked AS (
    SELECT d.*,
           (SELECT max(f.start_ns) FROM all_spans f
            WHERE f.run_id = d.run_id AND f.name = 'rolloutscope.fault'
              AND f.shard_idx = d.shard_idx AND f.start_ns <= d.start_ns) AS fault_ns,
           (SELECT max(p.start_ns) FROM shard_states p
            WHERE p.run_id = d.run_id AND p.shard_idx = d.shard_idx AND p.state = 'suspect'
              AND p.end_ns = d.start_ns) AS suspect_ns,
           (SELECT arg_min(struct_pack(ts := p.ts_ns, n := p.serving, b := p.serving_before,
                                       id := p.span_id), p.ts_ns)
            FROM pushes p
            WHERE p.run_id = d.run_id AND p.ts_ns >= d.start_ns
              AND p.serving < p.serving_before) AS drop_push
    FROM dead d
)
SELECT
    m.run_id,
    'p4-' || substr(md5(m.run_id || m.shard_idx || m.start_ns), 1, 10) AS incident_id,
    'quarantine' AS kind,
    'warning' AS severity,
    coalesce(m.fault_ns, m.suspect_ns, m.start_ns) AS start_ns,
    m.start_ns AS end_ns,
    'shard ' || m.shard_idx AS subject,
    format('Shard {} quarantined at {:.1f} s ({} -> dead on {}{}), {:.1f} s after {}{}.',
           m.shard_idx, (m.start_ns - m.origin_ns) / 1e9,
           coalesce(m.previous_state, 'healthy'), coalesce(m.trigger, 'unknown trigger'),
           CASE WHEN m.last_error IS NULL THEN '' ELSE ': ' || m.last_error END,
           (m.start_ns - coalesce(m.fault_ns, m.suspect_ns, m.start_ns)) / 1e9,
           CASE WHEN m.fault_ns IS NOT NULL THEN 'the fault'
                WHEN m.suspect_ns IS NOT NULL THEN 'it turned suspect'
                ELSE 'its first failure' END,
           CASE WHEN m.drop_push IS NULL THEN '; no router push has dropped it yet'
                ELSE format('; serving backends {} -> {} at {:.1f} s', m.drop_push.b,
                            m.drop_push.n, (m.drop_push.ts - m.origin_ns) / 1e9) END)
        AS summary,
    list_filter([m.span_id, m.drop_push.id], x -> x IS NOT NULL) AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by,
    m.shard_idx,
    (m.start_ns - coalesce(m.fault_ns, m.suspect_ns, m.start_ns)) / 1e9 AS detection_s
FROM marked m
UNION ALL
SELECT
    r.run_id,
    'p4-' || substr(md5(r.run_id || 'fleet' || r.ts_ns), 1, 10) AS incident_id,
    'quarantine' AS kind,
    'warning' AS severity,
    coalesce(r.suspect_ns, r.ts_ns) AS start_ns,
    r.ts_ns AS end_ns,
    'generation fleet' AS subject,
    format('{:.0f} shard(s) quarantined by {:.1f} s (gen_fleet/shards/dead {:.0f} -> {:.0f}{}){}{}.',
           r.dead - r.dead_before, (r.ts_ns - t.origin_ns) / 1e9, r.dead_before, r.dead,
           CASE WHEN r.serving.b IS NULL THEN ''
                ELSE format(', serving shards {:.0f} -> {:.0f}', r.serving.b, r.serving.n) END,
           CASE WHEN r.suspect_ns IS NULL OR r.suspect_ns = r.ts_ns THEN ''
                ELSE format(', {:.1f} s after a shard turned suspect',
                            (r.ts_ns - r.suspect_ns) / 1e9) END,
           CASE WHEN r.drop_push IS NULL THEN '; the router has not dropped a backend yet'
                ELSE format('; serving backends {} -> {} at {:.1f} s', r.drop_push.b,
                            r.drop_push.n, (r.drop_push.ts - t.origin_ns) / 1e9) END)
        AS summary,
    CAST([] AS VARCHAR[]) AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by,
    CAST(NULL AS INTEGER) AS shard_idx,
    (r.ts_ns - coalesce(r.suspect_ns, r.ts_ns)) / 1e9 AS detection_s
FROM dead_rises r
JOIN run_thresholds t ON t.run_id = r.run_id
