-- in_flight: one row per rollout in flight now (the live wait board, docs/wait-board.md): an RL
-- prompt group (rl.rollout.prompt) from its arrival until it commits, is dropped or skipped, and
-- a Gym rollout that names no RL prompt (gym.rollout, one agent /run). In flight means its span
-- has an open marker (open_spans: a live process announces each interval as it starts, and the
-- writer deletes the marker when the span ends), so the rows come from the open markers alone,
-- whatever the run's size.
-- - rollout_id, prompt_idx, start_ns: the rollout span's. attempt: the RL try (0-based) now
--   running, else the newest one that ended in the window.
-- - phase, from the rollout's open intervals: 'parked by snapshot <checkpoint id>'
--   (gym.agent.parked), 'verifying' (gym.verify), 'generating' (an agent execution, a Gym
--   rollout or a model call of it is open), 'dispatched' (an RL try is open, none of those is),
--   'waiting for redispatch' (no try open, one ended in the window), 'queued' (no try yet), with
--   ' behind <owner> fence' while an rl.admission.fence of the run is open; a Gym rollout with
--   nothing else open is 'running'.
-- - deadline_start_ns, budget_s: the open rollout deadline of the try (rl.deadline, kind
--   rollout): the board counts the budget down from its start (suspensions are known only once
--   the deadline's span ends).
-- - shard_idx, backend_url: the generation shard of the newest router request
--   (rl.router.request) for one of its rows, matched by the model call id
--   (<capture key>.g<execution generation>.t<turn>); server_name: the Gym server of its rollout.
-- - last_name, last_ns: the newest progress of the rollout: the latest start of one of its open
--   intervals, end of one of its spans (its router requests included), or one of its events.
-- in_flight_window(run, floor_ns, rows_back): the rows of run (NULL: every run); floor_ns bounds
-- the window the finished spans and the events are read from (those ending at or after it: a
-- live reader passes a few minutes before now). rows_back, where the store's row ids are its commit
-- order (a single file, not a lake), bounds it too: only the spans and events among the last
-- rows_back committed are read, so a tick reads the open markers and the recent rows, never the
-- run, however its spans lie in the file (a collector appends them as they end; an import or a
-- generator may not). floor_ns NULL and rows_back 0 or NULL: every span and event.
CREATE OR REPLACE MACRO in_flight_window(run, floor_ns, rows_back) AS TABLE
WITH open AS (
    SELECT * FROM open_spans WHERE run IS NULL OR run_id = run
),
rollouts AS (
    SELECT run_id, 'rl' AS dialect, rollout_id, prompt_idx, start_ns, trace_id, span_id,
           'p' || prompt_idx AS key, CAST(NULL AS VARCHAR) AS server_name
    FROM open WHERE name = 'rl.rollout.prompt' AND prompt_idx IS NOT NULL
    UNION ALL
    SELECT run_id, 'gym', coalesce(rollout_id, 'trace-' || left(trace_id, 12)), NULL, start_ns,
           trace_id, span_id, 'r' || coalesce(rollout_id, 'trace-' || left(trace_id, 12)),
           coalesce(attributes->>'nemo.gym.server.name', resource->>'nemo.gym.server.name')
    FROM open WHERE name = 'gym.rollout' AND prompt_idx IS NULL
),
-- each span and event by the rollout it belongs to: its RL prompt, else its capture key
open_parts AS (
    SELECT o.run_id, CASE WHEN o.prompt_idx IS NOT NULL THEN 'p' || o.prompt_idx
                          ELSE 'r' || o.rollout_id END AS key,
           o.name, o.rollout_id AS capture_key, o.attempt, o.checkpoint_id, o.start_ns,
           o.attributes
    FROM open o
    WHERE (o.prompt_idx IS NOT NULL OR o.rollout_id IS NOT NULL)
      AND o.name NOT IN ('rl.rollout.prompt')
),
recent AS (
    SELECT run_id, name, prompt_idx, rollout_id, attempt, shard_idx, end_ns,
           attributes->>'nemo.gym.model_call.id' AS call_id,
           attributes->>'nemo.rl.gen.backend.url' AS backend_url
    FROM spans
    WHERE (run IS NULL OR run_id = run) AND (floor_ns IS NULL OR end_ns >= floor_ns)
      AND rowid >= CASE WHEN rows_back > 0 THEN (SELECT count(*) FROM spans) - rows_back
                          ELSE 0 END
),
recent_parts AS (
    SELECT run_id, CASE WHEN prompt_idx IS NOT NULL THEN 'p' || prompt_idx
                        ELSE 'r' || rollout_id END AS key, name, attempt, end_ns
    FROM recent
    WHERE prompt_idx IS NOT NULL OR rollout_id IS NOT NULL
),
recent_events AS (
    SELECT run_id, CASE WHEN prompt_idx IS NOT NULL THEN 'p' || prompt_idx
                        ELSE 'r' || rollout_id END AS key, name, ts_ns
    FROM span_events
    WHERE (run IS NULL OR run_id = run) AND (floor_ns IS NULL OR ts_ns >= floor_ns)
      AND rowid >= CASE WHEN rows_back > 0 THEN (SELECT count(*) FROM span_events) - rows_back
                          ELSE 0 END
      AND (prompt_idx IS NOT NULL OR rollout_id IS NOT NULL)
),
-- the capture keys each rollout's rows run under (its open executions and Gym rollouts)
capture_keys AS (
    SELECT DISTINCT run_id, key, capture_key FROM open_parts
    WHERE capture_key IS NOT NULL AND name IN ('gym.agent.execution', 'gym.rollout')
),
routed AS (
    SELECT c.run_id, c.key,
           arg_max(r.shard_idx, r.end_ns) AS shard_idx,
           arg_max(r.backend_url, r.end_ns) AS backend_url,
           max(r.end_ns) AS routed_ns
    FROM recent r
    JOIN capture_keys c
        ON c.run_id = r.run_id
       AND c.capture_key = regexp_extract(r.call_id, '^(.+)\.g[0-9]+\.t[0-9]+$', 1)
    WHERE r.name = 'rl.router.request' AND r.call_id IS NOT NULL
    GROUP BY c.run_id, c.key
),
opened AS (
    SELECT run_id, key,
           max(attempt) FILTER (WHERE name = 'rl.rollout.attempt') AS open_attempt,
           bool_or(name = 'rl.rollout.attempt') AS try_open,
           arg_max(checkpoint_id, start_ns) FILTER (WHERE name = 'gym.agent.parked') AS parked_by,
           bool_or(name = 'gym.verify') AS verifying,
           bool_or(name IN ('gym.agent.execution', 'gym.rollout', 'gym.agent.responses')
                   OR name LIKE 'gym.model.%') AS generating,
           max(start_ns) FILTER (
               WHERE name = 'rl.deadline'
                 AND (attributes->>'nemo.rl.deadline.kind') = 'rollout') AS deadline_start_ns,
           arg_max(TRY_CAST(attributes->>'nemo.rl.deadline.budget_s' AS DOUBLE), start_ns)
               FILTER (WHERE name = 'rl.deadline'
                         AND (attributes->>'nemo.rl.deadline.kind') = 'rollout') AS budget_s,
           arg_max(name, start_ns) AS open_name,
           max(start_ns) AS open_ns
    FROM open_parts
    GROUP BY run_id, key
),
ended AS (
    SELECT run_id, key,
           max(attempt) FILTER (WHERE name = 'rl.rollout.attempt') AS ended_attempt,
           arg_max(name, end_ns) AS ended_name,
           max(end_ns) AS ended_ns
    FROM recent_parts
    GROUP BY run_id, key
),
evented AS (
    SELECT run_id, key, arg_max(name, ts_ns) AS event_name, max(ts_ns) AS event_ns
    FROM recent_events
    GROUP BY run_id, key
),
fences AS (
    SELECT run_id, string_agg(DISTINCT attributes->>'nemo.rl.fence.owner', ', ') AS owners
    FROM open WHERE name = 'rl.admission.fence'
    GROUP BY run_id
),
progress AS (
    -- the newest of: a start of an open interval, an end of a span, an event, a routed call
    SELECT r.*, o.open_attempt, o.try_open, o.parked_by, o.verifying, o.generating,
           o.deadline_start_ns, o.budget_s, e.ended_attempt,
           g.shard_idx, g.backend_url,
           greatest(r.start_ns, o.open_ns, e.ended_ns, v.event_ns, g.routed_ns) AS last_ns,
           CASE greatest(r.start_ns, o.open_ns, e.ended_ns, v.event_ns, g.routed_ns)
               WHEN g.routed_ns THEN 'rl.router.request ended'
               WHEN e.ended_ns THEN e.ended_name || ' ended'
               WHEN v.event_ns THEN v.event_name
               WHEN o.open_ns THEN o.open_name || ' started'
               ELSE (CASE r.dialect WHEN 'rl' THEN 'rl.rollout.prompt' ELSE 'gym.rollout' END)
                    || ' started'
           END AS last_name
    FROM rollouts r
    LEFT JOIN opened o ON o.run_id = r.run_id AND o.key = r.key
    LEFT JOIN ended e ON e.run_id = r.run_id AND e.key = r.key
    LEFT JOIN evented v ON v.run_id = r.run_id AND v.key = r.key
    LEFT JOIN routed g ON g.run_id = r.run_id AND g.key = r.key
)
SELECT
    p.run_id,
    p.dialect,
    p.rollout_id,
    p.prompt_idx,
    coalesce(p.open_attempt, p.ended_attempt) AS attempt,
    p.start_ns,
    CASE WHEN p.parked_by IS NOT NULL THEN 'parked by snapshot ' || p.parked_by
         WHEN p.verifying THEN 'verifying'
         WHEN p.generating THEN 'generating'
         WHEN p.try_open THEN 'dispatched'
         WHEN p.dialect = 'gym' THEN 'running'
         ELSE (CASE WHEN p.ended_attempt IS NOT NULL THEN 'waiting for redispatch'
                    ELSE 'queued' END)
              || coalesce(' behind ' || f.owners || ' fence', '')
    END AS phase,
    p.deadline_start_ns,
    p.budget_s,
    p.shard_idx,
    p.backend_url,
    p.server_name,
    p.last_name,
    p.last_ns,
    p.trace_id,
    p.span_id
FROM progress p
LEFT JOIN fences f ON f.run_id = p.run_id;

CREATE OR REPLACE VIEW in_flight AS
SELECT * FROM in_flight_window(NULL, NULL, 0)
