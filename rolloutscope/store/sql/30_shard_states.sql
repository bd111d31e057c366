-- shard_states: one row per stay of a generation shard in one fleet-health state
-- (rl.gen_fleet.shard_state; docs/domain/fleet-health.md#transitions). end_ns is NULL for the
-- current state. serving is true for healthy and suspect (the serving set). trigger names what
-- moved the shard into this state (probe_failure, reported_failure, probe_success, refit, restart,
-- loaded, retire, initial); membership_epoch is the fleet's epoch after the transition.
CREATE OR REPLACE VIEW shard_states AS
SELECT
    run_id,
    shard_idx,
    attributes->>'nemo.rl.gen_fleet.state' AS state,
    start_ns,
    end_ns,
    attributes->>'nemo.rl.gen_fleet.trigger' AS trigger,
    TRY_CAST(attributes->>'nemo.rl.gen_fleet.membership_epoch' AS BIGINT) AS membership_epoch,
    attributes->>'nemo.rl.gen_fleet.previous_state' AS previous_state,
    attributes->>'nemo.rl.gen_fleet.last_error' AS last_error,
    attributes->>'nemo.rl.gen.backend.url' AS backend_url,
    TRY_CAST(attributes->>'nemo.rl.gen_fleet.weight_version' AS BIGINT) AS weight_version,
    TRY_CAST(attributes->>'nemo.rl.gen_fleet.probe_failures' AS INTEGER) AS probe_failures,
    TRY_CAST(attributes->>'nemo.rl.gen_fleet.reported_failures' AS INTEGER) AS reported_failures,
    TRY_CAST(attributes->>'nemo.rl.gen_fleet.restart_attempts' AS INTEGER) AS restart_attempts,
    (attributes->>'nemo.rl.gen_fleet.state') IN ('healthy', 'suspect') AS serving,
    span_id,
    is_open
FROM all_spans
WHERE name = 'rl.gen_fleet.shard_state'
