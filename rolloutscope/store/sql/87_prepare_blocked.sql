-- prepare_blocked (P7 in docs/domain/incidents.md; NVIDIA-NeMo/Gym #3883): a participant's prepare
-- ran out its deadline without becoming ready because responses were already streaming (or, in the
-- older protocol, executions still running / parked without a boundary). The coordinator stops at
-- that stage and agents behind it stay park_requested. A prepare blocked only by an unacknowledged
-- completion is reported as stranded_completion instead, and a lost worker as export_failed.
CREATE OR REPLACE VIEW prepare_blocked AS
SELECT
    o.run_id,
    'p7-' || substr(md5(o.run_id || o.span_id), 1, 10) AS incident_id,
    'prepare_blocked' AS kind,
    'warning' AS severity,
    o.start_ns,
    o.end_ns,
    o.checkpoint_id || ' ' || o.participant_kind AS subject,
    format('Snapshot {}: the {} prepare ran {:.1f} s and was not ready{}{}; the coordinator '
           'stopped at stage {}.',
           o.checkpoint_id, o.participant_kind, o.duration_s,
           CASE WHEN coalesce(o.blockers, 0) > 0 AND o.blocker_keys IS NOT NULL
                THEN format(': {} response(s) already streaming ({})', o.blockers,
                            array_to_string(CAST(json_extract_string(o.blocker_keys, '$[*]')
                                                 AS VARCHAR[])[1:5], ', '))
                -- the draft checkpoint telemetry counts the blockers but names none
                WHEN coalesce(o.blockers, 0) > 0
                THEN format(': {} blocker(s)', o.blockers)
                ELSE '' END,
           CASE WHEN coalesce(o.running, 0) + coalesce(o.parked_without_boundary, 0) > 0
                THEN format(' ({} running, {} parked without a boundary)',
                            coalesce(o.running, 0), coalesce(o.parked_without_boundary, 0))
                ELSE '' END,
           coalesce(c.stopped_at, o.participant_kind)) AS summary,
    list_filter([o.span_id, c.span_id], x -> x IS NOT NULL) AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by
FROM checkpoint_ops o
LEFT JOIN checkpoint_ops c
    ON c.run_id = o.run_id AND c.checkpoint_id = o.checkpoint_id
   AND c.participant_kind = 'controller' AND c.op = 'prepare'
WHERE o.op = 'prepare' AND o.outcome = 'error' AND o.participant_kind <> 'controller'
  AND coalesce(o.completed_unacknowledged, 0) = 0
  AND coalesce(o.code, '') NOT IN ('export_failed', 'lease_expired')
