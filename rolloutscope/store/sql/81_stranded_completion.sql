-- stranded_completion (P1/P2 in docs/domain/incidents.md; NVIDIA-NeMo/RL #4266): an agent
-- execution finished but the controller never acknowledged it, and nothing else can release it
-- (retire refuses a completed run). It counts once the result is clearly abandoned: the RL try
-- that dispatched it had already ended without committing it, or a later prepare failed behind it,
-- or its try never committed and it stayed unacknowledged longer than prepare_timeout_s.
-- blocked_prepares counts the agent prepares that failed while it waited; caused_by names the
-- deadline_fired_while_parked incident that stranded it, when there is one.
CREATE OR REPLACE VIEW stranded_completion AS
WITH unacknowledged AS (
    -- the rows of `completions` whose ack_ns is NULL, grouped as it groups them (per execution,
    -- NULL keys included) from the completion events that no ACK of their execution answers:
    -- the anti join leaves a few events to group, where reading `completions` grouped every
    -- execution of the run first (630k at 10M spans, about half of this view's time)
    SELECT c.run_id, c.rollout_id, c.attempt,
           any_value(c.prompt_idx) AS prompt_idx,
           min(c.ts_ns) AS completed_ns,
           arg_min(c.span_id, c.ts_ns) AS span_id
    FROM span_events c
    ANTI JOIN (SELECT run_id, rollout_id, attempt FROM span_events
               WHERE name = 'gym.agent.acknowledged') k
        ON k.run_id IS NOT DISTINCT FROM c.run_id
       AND k.rollout_id IS NOT DISTINCT FROM c.rollout_id
       AND k.attempt IS NOT DISTINCT FROM c.attempt
    WHERE c.name = 'gym.agent.completed'
    GROUP BY c.run_id, c.rollout_id, c.attempt
),
stranded AS (
    SELECT c.*, t.origin_ns AS origin_ns, t.end_ns AS run_end_ns, t.prepare_timeout_s,
           a.end_ns AS attempt_end_ns, a.outcome AS attempt_outcome, a.failure_reason
    FROM unacknowledged c
    JOIN run_thresholds t ON t.run_id = c.run_id
    -- the RL try that dispatched it (a Gym row names no prompt, so it never matches; saying so
    -- spares every reader the Gym rows and their /run replies)
    LEFT JOIN rollout_attempts a
        ON a.run_id = c.run_id AND a.dialect = 'rl' AND a.prompt_idx = c.prompt_idx
       AND a.attempt IS NOT DISTINCT FROM c.attempt
),
blocked AS (
    SELECT s.run_id, s.rollout_id, s.attempt,
           count(o.span_id) AS blocked_prepares,
           list(o.span_id ORDER BY o.start_ns) AS prepare_span_ids,
           list(DISTINCT o.checkpoint_id) AS checkpoints
    FROM stranded s
    JOIN checkpoint_ops o
        ON o.run_id = s.run_id AND o.op = 'prepare' AND o.outcome = 'error'
       AND o.participant_kind = 'agent' AND o.start_ns >= s.completed_ns
    GROUP BY s.run_id, s.rollout_id, s.attempt
)
SELECT
    s.run_id,
    'p2-' || substr(md5(s.run_id || coalesce(s.rollout_id, '') || coalesce(s.attempt, -1)), 1, 10)
        AS incident_id,
    'stranded_completion' AS kind,
    'critical' AS severity,
    s.completed_ns AS start_ns,
    CAST(NULL AS BIGINT) AS end_ns,
    s.rollout_id || ' try ' || s.attempt AS subject,
    format('Rollout {} try {} finished at {:.1f} s but was never acknowledged{}; {} later '
           'snapshot prepare(s) failed behind it{}.',
           s.rollout_id, s.attempt, (s.completed_ns - s.origin_ns) / 1e9,
           CASE WHEN s.attempt_end_ns IS NOT NULL AND s.attempt_end_ns <= s.completed_ns
                THEN format(' (RL had given up on that try at {:.1f} s: {})',
                            (s.attempt_end_ns - s.origin_ns) / 1e9,
                            coalesce(s.failure_reason, s.attempt_outcome))
                ELSE '' END,
           coalesce(b.blocked_prepares, 0),
           CASE WHEN coalesce(b.blocked_prepares, 0) > 0
                THEN format(', each waiting out prepare_timeout_s={:g} s', s.prepare_timeout_s)
                ELSE '' END) AS summary,
    list_concat([s.span_id], coalesce(b.prepare_span_ids, [])) AS evidence,
    p1.incident_id AS caused_by,
    s.prompt_idx,
    s.attempt,
    coalesce(b.blocked_prepares, 0) AS blocked_prepares
FROM stranded s
LEFT JOIN blocked b
    ON b.run_id = s.run_id AND b.rollout_id IS NOT DISTINCT FROM s.rollout_id
   AND b.attempt IS NOT DISTINCT FROM s.attempt
LEFT JOIN deadline_fired_while_parked p1
    ON p1.run_id = s.run_id AND p1.prompt_idx = s.prompt_idx
   AND p1.attempt IS NOT DISTINCT FROM s.attempt
WHERE coalesce(b.blocked_prepares, 0) > 0
   -- a committed try holds its receipt and flushes it before the next prepare: not stranded
   OR (coalesce(s.attempt_outcome, 'open') <> 'committed'
       AND ((s.attempt_end_ns IS NOT NULL AND s.attempt_end_ns <= s.completed_ns)
            OR (s.run_end_ns - s.completed_ns) / 1e9 > s.prepare_timeout_s))
