-- export_failed (P8 in docs/domain/incidents.md; NVIDIA-NeMo/Gym #3883): on a multi-worker policy
-- server a worker was lost after the commit checked readiness, so the commit failed with
-- export_failed. The failure is final for that checkpoint (retried commits fail the same way) and
-- a later restore on that server is refused until it restarts.
CREATE OR REPLACE VIEW export_failed AS
WITH failed AS (
    SELECT run_id, checkpoint_id, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           count(*) AS attempts, list(span_id ORDER BY start_ns) AS span_ids,
           max(workers_expected) AS expected, min(workers_acknowledged) AS acknowledged
    FROM checkpoint_ops
    WHERE code = 'export_failed'
    GROUP BY run_id, checkpoint_id
)
SELECT
    f.run_id,
    'p8-' || substr(md5(f.run_id || f.checkpoint_id), 1, 10) AS incident_id,
    'export_failed' AS kind,
    'critical' AS severity,
    f.start_ns,
    f.end_ns,
    f.checkpoint_id AS subject,
    format('Snapshot {}: commit failed with export_failed at {:.1f} s{} ({} failed attempt(s)); '
           'the checkpoint cannot commit and restores on that server are refused until it '
           'restarts.',
           f.checkpoint_id, (f.start_ns - t.origin_ns) / 1e9,
           CASE WHEN f.expected IS NOT NULL
                THEN format(': {} of {} policy workers acknowledged', f.acknowledged, f.expected)
                ELSE '' END, f.attempts) AS summary,
    f.span_ids AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM failed f
JOIN run_thresholds t ON t.run_id = f.run_id
