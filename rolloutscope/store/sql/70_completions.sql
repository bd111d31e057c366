-- completions: one row per finished agent execution (event gym.agent.completed: Gym keeps the
-- result until the controller acknowledges it) with the time of its ACK (event
-- gym.agent.acknowledged), NULL while unacknowledged. An unacknowledged completion blocks every
-- later checkpoint prepare of the first protocol generation
-- (docs/domain/checkpoint-protocol.md#the-first-generation; P1/P2 in docs/domain/incidents.md).
CREATE OR REPLACE VIEW completions AS
-- one pass over both events, grouped by execution (no join of two million-row aggregates)
WITH per_execution AS (
    SELECT run_id, rollout_id, attempt,
           any_value(prompt_idx) FILTER (WHERE name = 'gym.agent.completed') AS prompt_idx,
           min(ts_ns) FILTER (WHERE name = 'gym.agent.completed') AS completed_ns,
           min(ts_ns) FILTER (WHERE name = 'gym.agent.acknowledged') AS ack_ns,
           arg_min(attributes->>'nemo.gym.agent.result_id', ts_ns)
               FILTER (WHERE name = 'gym.agent.completed') AS result_id,
           arg_min(span_id, ts_ns) FILTER (WHERE name = 'gym.agent.completed') AS span_id
    FROM span_events
    WHERE name IN ('gym.agent.completed', 'gym.agent.acknowledged')
    GROUP BY run_id, rollout_id, attempt
)
SELECT run_id, rollout_id, attempt, prompt_idx, completed_ns, ack_ns, result_id, span_id
FROM per_execution
WHERE completed_ns IS NOT NULL
