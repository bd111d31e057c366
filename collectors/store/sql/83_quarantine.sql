-- quarantine (P4, seed 003, DOMAIN.md §3.3-§3.5): a generation shard left the serving set for
-- dead. Reports what moved it (probe or reported failures, with the last error), the time from
-- the fault to the quarantine — from the injected fault when a replay recorded one, else from
-- the shard's first failure (the start of its suspect stay) — and the serving-backends drop the
-- next router membership push made (N -> N-1).
CREATE OR REPLACE VIEW quarantine AS
WITH dead AS (
    SELECT s.*, t.start_ns AS run_start_ns
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
           m.shard_idx, (m.start_ns - m.run_start_ns) / 1e9,
           coalesce(m.previous_state, 'healthy'), coalesce(m.trigger, 'unknown trigger'),
           CASE WHEN m.last_error IS NULL THEN '' ELSE ': ' || m.last_error END,
           (m.start_ns - coalesce(m.fault_ns, m.suspect_ns, m.start_ns)) / 1e9,
           CASE WHEN m.fault_ns IS NOT NULL THEN 'the fault'
                WHEN m.suspect_ns IS NOT NULL THEN 'it turned suspect'
                ELSE 'its first failure' END,
           CASE WHEN m.drop_push IS NULL THEN '; no router push has dropped it yet'
                ELSE format('; serving backends {} -> {} at {:.1f} s', m.drop_push.b,
                            m.drop_push.n, (m.drop_push.ts - m.run_start_ns) / 1e9) END)
        AS summary,
    list_filter([m.span_id, m.drop_push.id], x -> x IS NOT NULL) AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by,
    m.shard_idx,
    (m.start_ns - coalesce(m.fault_ns, m.suspect_ns, m.start_ns)) / 1e9 AS detection_s
FROM marked m
