-- deadline_fired_while_parked (P1 in docs/domain/incidents.md; NVIDIA-NeMo/RL #4266): an RL
-- rollout deadline fired while a snapshot had that very rollout try parked. RL then stops reading
-- the try without cancelling it; Gym resumes and finishes it after the snapshot, and nobody
-- acknowledges the result (see stranded_completion). Matched on (run, prompt, RL try), the park
-- covering the firing instant: a deadline that fires before the rollout is parked (even 1 ms
-- before the window opens) is not this pattern. parked_s is how long the try had been parked when
-- the deadline fired; budget_left_s is what the deadline had left when the snapshot window opened.
CREATE OR REPLACE VIEW deadline_fired_while_parked AS
SELECT
    d.run_id,
    'p1-' || substr(md5(d.run_id || d.deadline_id), 1, 10) AS incident_id,
    'deadline_fired_while_parked' AS kind,
    'critical' AS severity,
    d.fired_ns AS start_ns,
    d.fired_ns AS end_ns,
    coalesce(d.rollout_id, 'prompt ' || d.prompt_idx) || ' try ' || d.attempt AS subject,
    format('Rollout {} try {}: its {:g} s deadline fired at {:.1f} s while snapshot {} had it '
           'parked ({:.1f} s parked, {:.1f} s of budget left when the snapshot began at {:.1f} s); '
           'RL gave up on the try without cancelling it.',
           coalesce(d.rollout_id, 'prompt ' || d.prompt_idx), d.attempt, d.budget_s,
           (d.fired_ns - t.origin_ns) / 1e9, p.checkpoint_id,
           (d.fired_ns - p.start_ns) / 1e9,
           d.budget_s - (coalesce(w.start_ns, p.start_ns) - d.start_ns) / 1e9 + d.suspended_s,
           (coalesce(w.start_ns, p.start_ns) - t.origin_ns) / 1e9) AS summary,
    [d.span_id, p.span_id] AS evidence,
    CAST(NULL AS VARCHAR) AS caused_by,
    d.prompt_idx,
    d.attempt,
    p.checkpoint_id,
    (d.fired_ns - p.start_ns) / 1e9 AS parked_s,
    d.budget_s - (coalesce(w.start_ns, p.start_ns) - d.start_ns) / 1e9 + d.suspended_s
        AS budget_left_s
FROM (SELECT * FROM deadlines WHERE outcome = 'fired' AND kind = 'rollout') d
-- keys of one side each, so the join hashes: the prompt group where a record names one (RL and
-- Gym records of a group share it), else the rollout id (an expression mixing both sides
-- would leave a filter over the cross product: minutes at 10M spans). Two keys, not one
-- coalesce('p' || prompt_idx, 'r' || rollout_id): the same matches, without writing the text
-- of every parked interval's prompt (400k at 10M spans, read twice in `incidents`)
JOIN parked_intervals p
    ON p.run_id = d.run_id
   AND p.attempt IS NOT DISTINCT FROM d.attempt
   AND p.prompt_idx IS NOT DISTINCT FROM d.prompt_idx
   AND CASE WHEN p.prompt_idx IS NULL THEN p.rollout_id ELSE '' END
       = CASE WHEN d.prompt_idx IS NULL THEN d.rollout_id ELSE '' END
   AND p.start_ns <= d.fired_ns
   AND (p.end_ns IS NULL OR p.end_ns > d.fired_ns)
JOIN run_thresholds t ON t.run_id = d.run_id
LEFT JOIN checkpoint_windows w
    ON w.run_id = p.run_id AND w.checkpoint_id = p.checkpoint_id
