-- redispatch_exhausted (P11 in docs/domain/incidents.md; NVIDIA-NeMo/RL #3590): a prompt group
-- failed with infrastructure errors on max_infra_attempts_per_prompt tries: the outage outlasted
-- the retry budget (1, 2, 4, 8 s of capped exponential backoff), and the prompt was dropped or the
-- run raised RolloutRedispatchExhausted. caused_by names a quarantine that began before the first
-- failure, when there is one.
CREATE OR REPLACE VIEW redispatch_exhausted AS
WITH infra AS (
    SELECT run_id, prompt_idx, any_value(rollout_id) AS rollout_id, count(*) AS failures,
           min(start_ns) AS first_ns, max(end_ns) AS last_ns,
           mode(failure_reason) AS reason, list(span_id ORDER BY start_ns) AS ids
    FROM rollout_attempts
    WHERE failure_class = 'infra' AND outcome = 'failed'
    -- a try that names no prompt (a released Gym's attempt) counts against its own rollout
    GROUP BY run_id, prompt_idx, CASE WHEN prompt_idx IS NULL THEN rollout_id END
)
SELECT
    i.run_id,
    'p11-' || substr(md5(i.run_id || coalesce(CAST(i.prompt_idx AS VARCHAR),
                                              'rollout ' || i.rollout_id)), 1, 9) AS incident_id,
    'redispatch_exhausted' AS kind,
    'critical' AS severity,
    i.first_ns AS start_ns,
    i.last_ns AS end_ns,
    coalesce(i.rollout_id, 'prompt ' || i.prompt_idx) AS subject,
    format('Prompt {} failed {} times on infrastructure errors ({}) from {:.1f} s to {:.1f} s, '
           'exhausting max_infra_attempts_per_prompt={}.',
           coalesce(CAST(i.prompt_idx AS VARCHAR), i.rollout_id), i.failures, i.reason, (i.first_ns - t.origin_ns) / 1e9,
           (i.last_ns - t.origin_ns) / 1e9, t.max_infra_attempts_per_prompt) AS summary,
    i.ids AS evidence,
    (SELECT arg_max(q.incident_id, q.end_ns) FROM quarantine q
     WHERE q.run_id = i.run_id AND q.start_ns <= i.first_ns) AS caused_by
FROM infra i
JOIN run_thresholds t ON t.run_id = i.run_id
WHERE i.failures >= t.max_infra_attempts_per_prompt
