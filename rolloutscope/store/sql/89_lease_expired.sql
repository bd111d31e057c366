-- lease_expired (P9 in docs/domain/incidents.md): the controller went silent mid-checkpoint; after
-- deadline_ts + lease_grace_seconds the participant resumed on its own (an abort) and fenced the
-- checkpoint id. One incident per checkpoint and participant.
CREATE OR REPLACE VIEW lease_expired AS
WITH expiries AS (
    SELECT run_id, checkpoint_id, span_name, ts_ns, span_id,
           attributes->>'nemo.gym.checkpoint.participant_kind' AS kind_attr,
           attributes->>'nemo.gym.checkpoint.phase' AS phase
    FROM span_events WHERE name = 'gym.checkpoint.lease.expired'
    UNION ALL
    SELECT run_id, checkpoint_id, 'gym.checkpoint.' || op, end_ns, span_id, participant_kind,
           NULL
    FROM checkpoint_ops WHERE code = 'lease_expired'
),
per_participant AS (
    SELECT e.run_id, e.checkpoint_id, coalesce(e.kind_attr, s.participant_kind) AS participant,
           min(e.ts_ns) AS ts_ns, any_value(e.phase) AS phase, list(DISTINCT e.span_id) AS ids
    FROM expiries e
    LEFT JOIN spans s ON s.span_id = e.span_id AND s.run_id = e.run_id
    GROUP BY ALL
)
SELECT
    p.run_id,
    'p9-' || substr(md5(p.run_id || p.checkpoint_id || coalesce(p.participant, '')), 1, 10)
        AS incident_id,
    'lease_expired' AS kind,
    'warning' AS severity,
    p.ts_ns AS start_ns,
    p.ts_ns AS end_ns,
    p.checkpoint_id || coalesce(' ' || p.participant, '') AS subject,
    format('Snapshot {}: the {} participant''s lease expired at {:.1f} s{} after the controller '
           'fell silent (lease_grace_s={:g}); it resumed on its own and fenced the checkpoint.',
           p.checkpoint_id, coalesce(p.participant, 'unknown'), (p.ts_ns - t.origin_ns) / 1e9,
           coalesce(' in phase ' || p.phase, ''), t.lease_grace_s) AS summary,
    p.ids AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM per_participant p
JOIN run_thresholds t ON t.run_id = p.run_id
