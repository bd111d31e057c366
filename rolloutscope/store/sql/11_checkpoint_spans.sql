-- checkpoint_spans: one row per span of the draft checkpoint telemetry (gym.checkpoint.*),
-- finished or still open, with the columns checkpoint_steps reads of a step and of its parent
-- operation. A view of its own because each row is one span's: the store keeps these rows as
-- spans arrive (store/derived.py), and checkpoint_steps joins each step to its operation over
-- them instead of over every span. instance is nemo.gym.checkpoint.instance; outcome_attr
-- nemo.gym.checkpoint.outcome as sent; bytes, records and participants the step's counts.
CREATE OR REPLACE VIEW checkpoint_spans AS
SELECT
    run_id,
    trace_id,
    span_id,
    parent_span_id,
    name,
    checkpoint_id,
    participant_kind,
    attributes->>'nemo.gym.checkpoint.instance' AS instance,
    start_ns,
    end_ns,
    status_code,
    attributes->>'nemo.gym.checkpoint.outcome' AS outcome_attr,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.bytes' AS BIGINT) AS bytes,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.records' AS BIGINT) AS records,
    TRY_CAST(attributes->>'nemo.gym.checkpoint.participants' AS INTEGER) AS participants,
    is_open
FROM all_spans
WHERE name LIKE 'gym.checkpoint.%'
