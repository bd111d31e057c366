-- completions: one row per finished agent execution (event gym.agent.completed: Gym keeps the
-- result until the controller acknowledges it) with the time of its ACK (event
-- gym.agent.acknowledged), NULL while unacknowledged. An unacknowledged completion blocks every
-- later checkpoint prepare of the first protocol generation
-- (docs/domain/checkpoint-protocol.md#the-first-generation; P1/P2 in docs/domain/incidents.md).
--
-- completions_since(run, since_ns): the rows of one run whose execution has an event at or
-- after since_ns, grouped from that execution's events only (a live tick's read: a time filter
-- on the view's output would group every execution of the run first). NULL, NULL: the view.
CREATE OR REPLACE MACRO completions_since(run, since_ns) AS TABLE
WITH touched AS (  -- the executions an event at or after since_ns belongs to
    SELECT DISTINCT rollout_id, attempt
    FROM span_events
    WHERE name IN ('gym.agent.completed', 'gym.agent.acknowledged')
      AND run_id = run AND ts_ns >= since_ns
),
-- (each branch filters span_events itself: a CTE of the run's events, read by both, is
-- materialized whole, which made a tick's read 4-90 ms and the view twice as slow)
events AS (  -- every event (no since_ns), or the touched executions' events
    SELECT run_id, rollout_id, attempt, prompt_idx, name, ts_ns, attributes, span_id
    FROM span_events
    WHERE name IN ('gym.agent.completed', 'gym.agent.acknowledged')
      AND (run IS NULL OR run_id = run) AND since_ns IS NULL
    UNION ALL
    SELECT e.run_id, e.rollout_id, e.attempt, e.prompt_idx, e.name, e.ts_ns, e.attributes,
           e.span_id
    FROM span_events e
    SEMI JOIN touched t ON e.rollout_id IS NOT DISTINCT FROM t.rollout_id
                       AND e.attempt IS NOT DISTINCT FROM t.attempt
    WHERE e.name IN ('gym.agent.completed', 'gym.agent.acknowledged') AND e.run_id = run
),
-- one pass over both events, grouped by execution (no join of two million-row aggregates)
per_execution AS (
    SELECT run_id, rollout_id, attempt,
           any_value(prompt_idx) FILTER (WHERE name = 'gym.agent.completed') AS prompt_idx,
           min(ts_ns) FILTER (WHERE name = 'gym.agent.completed') AS completed_ns,
           min(ts_ns) FILTER (WHERE name = 'gym.agent.acknowledged') AS ack_ns,
           arg_min(attributes->>'nemo.gym.agent.result_id', ts_ns)
               FILTER (WHERE name = 'gym.agent.completed') AS result_id,
           arg_min(span_id, ts_ns) FILTER (WHERE name = 'gym.agent.completed') AS span_id
    FROM events
    GROUP BY run_id, rollout_id, attempt
)
SELECT run_id, rollout_id, attempt, prompt_idx, completed_ns, ack_ns, result_id, span_id
FROM per_execution
WHERE completed_ns IS NOT NULL;

CREATE OR REPLACE VIEW completions AS
SELECT * FROM completions_since(NULL, NULL)
