-- completions: one row per finished agent execution (event gym.agent.completed: Gym keeps the
-- result until the controller acknowledges it) with the time of its ACK (event
-- gym.agent.acknowledged), NULL while unacknowledged. An unacknowledged completion blocks every
-- later checkpoint prepare of the first protocol generation
-- (docs/domain/checkpoint-protocol.md#the-first-generation; P1/P2 in docs/domain/incidents.md).
CREATE OR REPLACE VIEW completions AS
WITH done AS (
    SELECT run_id, rollout_id, attempt,
           any_value(prompt_idx) AS prompt_idx,
           min(ts_ns) AS completed_ns,
           arg_min(attributes->>'nemo.gym.agent.result_id', ts_ns) AS result_id,
           arg_min(span_id, ts_ns) AS span_id
    FROM span_events
    WHERE name = 'gym.agent.completed'
    GROUP BY run_id, rollout_id, attempt
),
ack AS (
    SELECT run_id, rollout_id, attempt, min(ts_ns) AS ack_ns
    FROM span_events
    WHERE name = 'gym.agent.acknowledged'
    GROUP BY run_id, rollout_id, attempt
)
SELECT
    d.run_id,
    d.rollout_id,
    d.attempt,
    d.prompt_idx,
    d.completed_ns,
    a.ack_ns,
    d.result_id,
    d.span_id
FROM done d
LEFT JOIN ack a
    ON a.run_id = d.run_id
   AND a.rollout_id IS NOT DISTINCT FROM d.rollout_id
   AND a.attempt IS NOT DISTINCT FROM d.attempt
