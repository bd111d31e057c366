-- trace_roots: one row per root of a trace as far as this store knows: a span with no parent,
-- or whose parent is not in the store (not arrived yet, sent by an untraced process, or never
-- exported; orphan is true then). What a trace browser lists, for any OTel SDK's data. Each
-- released Gym rollout is one trace, rooted at the agent's POST /run SERVER span. rollout_id
-- is the Gym rollout id (capture key) of the trace's gym.rollout span, else the root's own.
CREATE OR REPLACE VIEW trace_roots AS
WITH rollouts AS (
    SELECT run_id, trace_id, min(rollout_id) AS rollout_id
    FROM all_spans
    WHERE name = 'gym.rollout' AND rollout_id IS NOT NULL
    GROUP BY run_id, trace_id
),
roots AS (
    SELECT s.*, s.parent_span_id IS NOT NULL AS orphan
    FROM all_spans s
    WHERE s.parent_span_id IS NULL
       OR NOT EXISTS (SELECT 1 FROM all_spans p
                      WHERE p.run_id = s.run_id AND p.trace_id = s.trace_id
                        AND p.span_id = s.parent_span_id)
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
    s.orphan,
    s.is_open
FROM roots s
LEFT JOIN rollouts r ON r.run_id = s.run_id AND r.trace_id = s.trace_id
