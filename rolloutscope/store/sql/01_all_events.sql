-- all_events: every span event (an instant: a transition, a deadline firing, an ACK, a retry),
-- with the join keys (rollout, attempt, prompt, checkpoint, shard) it or its span carries.
-- Readers use this name rather than the raw span_events table, so the contract stays the views.
CREATE OR REPLACE VIEW all_events AS
SELECT * FROM span_events
