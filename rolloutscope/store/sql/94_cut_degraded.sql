-- cut_degraded (P15 in docs/domain/incidents.md; NVIDIA-NeMo/Gym #3883): generation cuts that
-- failed or were skipped (constrained decoding) at a prepare: those calls regenerate from scratch
-- after a restore. A cost, not a failure.
CREATE OR REPLACE VIEW cut_degraded AS
SELECT
    o.run_id,
    'p15-' || substr(md5(o.run_id || o.span_id), 1, 9) AS incident_id,
    'cut_degraded' AS kind,
    'info' AS severity,
    o.start_ns,
    o.end_ns,
    o.checkpoint_id || ' model' AS subject,
    format('Snapshot {}: {} generation cut(s) failed and {} were skipped at prepare; those calls '
           'regenerate after a restore.', o.checkpoint_id, coalesce(o.cut_failed, 0),
           coalesce(o.cut_skipped, 0)) AS summary,
    [o.span_id] AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM checkpoint_ops o
WHERE o.op = 'prepare' AND o.participant_kind = 'model'
  AND coalesce(o.cut_failed, 0) + coalesce(o.cut_skipped, 0) > 0
