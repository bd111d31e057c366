-- trace_roots: one row per root span a run holds (a span with no parent: the start of a trace
-- as far as this store knows), from any OTel SDK: what a trace browser lists. Each released Gym
-- rollout is one trace, rooted at the agent's POST /run SERVER span; a trace whose root has not
-- arrived yet (children can arrive first) is not listed until it does. rollout_id is the Gym
-- rollout id (capture key) of the trace's gym.rollout span, else the one the root carries.
CREATE OR REPLACE VIEW trace_roots AS
WITH rollouts AS (
    SELECT run_id, trace_id, min(rollout_id) AS rollout_id
    FROM all_spans
    WHERE name = 'gym.rollout' AND rollout_id IS NOT NULL
    GROUP BY run_id, trace_id
)
SELECT
    s.run_id,
    s.trace_id,
    s.span_id,
    s.name,
    s.kind,
    s.service,
    s.start_ns,
    s.end_ns,
    (s.end_ns - s.start_ns) / 1e9 AS duration_s,
    s.status_code,
    coalesce(r.rollout_id, s.rollout_id) AS rollout_id,
    s.is_open
FROM all_spans s
LEFT JOIN rollouts r ON r.run_id = s.run_id AND r.trace_id = s.trace_id
WHERE s.parent_span_id IS NULL
