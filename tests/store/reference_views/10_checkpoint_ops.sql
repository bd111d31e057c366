-- checkpoint_ops: one row per checkpoint operation of a participant (gym.checkpoint.<op>) or of
-- the controller's coordinator (gym.checkpoint.coordinate.<op>, participant_kind 'controller').
-- Source: the draft checkpoint telemetry
-- (docs/domain/telemetry.md#the-draft-checkpoint-telemetry). outcome is ok | error (NULL while the
-- operation is still running); code is the protocol error code
-- (docs/domain/checkpoint-protocol.md#error-codes); blockers is the count of capture keys that
-- kept a prepare from being ready, blocker_keys the keys themselves (at most 100); stopped_at is
-- the stage where a coordinated prepare stopped.
-- The draft (nemo_gym/_checkpoint/telemetry.py in NVIDIA-NeMo/Gym) records no outcome
-- attribute: a raised operation ends its span with an ERROR status, and a prepare that was not
-- ready by its deadline returns normally with phase 'preparing' (the coordinator's with
-- prepared = false), which counts as an error here as it does for the controller. phase is the
-- participant's phase after the operation; records, bytes, episodes, rollouts and participants
-- are what the draft counts on the operation (the bytes a commit wrote are on its write step:
-- checkpoint_steps).
CREATE OR REPLACE VIEW checkpoint_ops AS
SELECT
    run_id,
    checkpoint_id,
    coalesce(participant_kind,
             CASE WHEN name LIKE 'gym.checkpoint.coordinate.%' THEN 'controller' END)
        AS participant_kind,
    attributes->>'nemo.gym.checkpoint.instance' AS instance,
    CASE WHEN name LIKE 'gym.checkpoint.coordinate.%' THEN split_part(name, '.', 4)
         ELSE split_part(name, '.', 3) END AS op,
    start_ns,
    end_ns,
    CASE WHEN end_ns IS NULL THEN NULL
         ELSE coalesce(attributes->>'nemo.gym.checkpoint.outcome',
                       CASE WHEN status_code = 'ERROR' THEN 'error'
                            WHEN name IN ('gym.checkpoint.prepare',
                                          'gym.checkpoint.coordinate.prepare')
                                 AND ((attributes->>'nemo.gym.checkpoint.phase') = 'preparing'
                                      OR TRY_CAST(attributes->>'nemo.gym.checkpoint.prepared'
                                                  AS BOOLEAN) = false)
                                 THEN 'error'
                            ELSE 'ok' END)
    END AS outcome,
    attributes->>'nemo.gym.checkpoint.phase' AS phase,
    attributes->>'nemo.gym.checkpoint.code' AS code,
    coalesce(TRY_CAST(attributes->>'nemo.gym.checkpoint.blocker_count' AS INTEGER),
             TRY_CAST(attributes->>'nemo.gym.checkpoint.blockers' AS INTEGER)) AS blockers,
    attributes->'nemo.gym.checkpoint.blocker_keys' AS blocker_keys,
    attributes->>'nemo.gym.checkpoint.stopped_at' AS stopped_at,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.prepared' AS BOOLEAN) AS prepared,
    -- report counters of the participant's /status at the end of the operation
    TRY_CAST(attributes->>'nemo.gym.checkpoint.count.running' AS INTEGER) AS running,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.count.parked_without_boundary' AS INTEGER)
        AS parked_without_boundary,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.count.completed_unacknowledged' AS INTEGER)
        AS completed_unacknowledged,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.count.held' AS INTEGER) AS held,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.count.cut_failed' AS INTEGER) AS cut_failed,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.count.cut_skipped' AS INTEGER) AS cut_skipped,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.workers.expected' AS INTEGER) AS workers_expected,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.workers.acknowledged' AS INTEGER)
        AS workers_acknowledged,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.records' AS BIGINT) AS records,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.bytes' AS BIGINT) AS bytes,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.episodes' AS INTEGER) AS episodes,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.rollouts' AS INTEGER) AS rollouts,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.participants' AS INTEGER) AS participants,
    (end_ns - start_ns) / 1e9 AS duration_s,
    trace_id,
    span_id,
    is_open
FROM all_spans
WHERE name IN (
    'gym.checkpoint.prepare', 'gym.checkpoint.commit', 'gym.checkpoint.restore',
    'gym.checkpoint.resume', 'gym.checkpoint.retire', 'gym.checkpoint.forget',
    'gym.checkpoint.renew',
    'gym.checkpoint.coordinate.prepare', 'gym.checkpoint.coordinate.commit',
    'gym.checkpoint.coordinate.restore', 'gym.checkpoint.coordinate.resume',
    'gym.checkpoint.coordinate.retire', 'gym.checkpoint.coordinate.forget',
    'gym.checkpoint.coordinate.renew')
