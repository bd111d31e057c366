-- stale_weights_serving (P13 in docs/domain/incidents.md): after a weight sync to trainer version
-- v, a shard in the serving set still holds older weights — a correctness bug, since rollouts are
-- generated from a policy the trainer has moved past. Checked at the end of every weight sync.
CREATE OR REPLACE VIEW stale_weights_serving AS
WITH syncs AS (
    SELECT run_id, end_ns, span_id,
           TRY_CAST(attributes->>'nemo.rl.trainer_version' AS BIGINT) AS trainer_version
    FROM all_spans
    WHERE name = 'rl.weight_sync' AND end_ns IS NOT NULL
),
stale AS (
    SELECT s.run_id, s.shard_idx, s.weight_version, y.trainer_version, y.end_ns AS sync_end_ns,
           s.span_id, y.span_id AS sync_span_id, s.end_ns AS state_end_ns
    FROM syncs y
    JOIN shard_states s
        ON s.run_id = y.run_id AND s.serving
       AND s.start_ns <= y.end_ns AND (s.end_ns IS NULL OR s.end_ns > y.end_ns)
    WHERE s.weight_version < y.trainer_version
)
SELECT
    s.run_id,
    'p13-' || substr(md5(s.run_id || s.shard_idx || s.sync_end_ns), 1, 9) AS incident_id,
    'stale_weights_serving' AS kind,
    'critical' AS severity,
    s.sync_end_ns AS start_ns,
    s.state_end_ns AS end_ns,
    'shard ' || s.shard_idx AS subject,
    format('Shard {} kept serving weight version {} after the weight sync to version {} at '
           '{:.1f} s.', s.shard_idx, s.weight_version, s.trainer_version,
           (s.sync_end_ns - t.origin_ns) / 1e9) AS summary,
    [s.span_id, s.sync_span_id] AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM stale s
JOIN run_thresholds t ON t.run_id = s.run_id
