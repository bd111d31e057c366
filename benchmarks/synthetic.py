"""A synthetic run of any size, written straight into a run store with DuckDB SQL.

Not a replay (the engine makes realistic runs, but 10M spans through the SDK take minutes): a
bulk generator for the size benchmarks. Per RL prompt: the prompt span, one RL try and its
deadline. Most prompts run on Gym through rolloutscope's wrappers: the agent execution with its
completion (and usually its ACK), the gym.rollout span stamped with the prompt and a few model
calls; a snapshot every ``snapshot_every_s`` parks what is in flight. About one of those prompts
in 500 has its deadline fire while parked and its completion left unacknowledged, so the
incident views have work to do. One prompt in ``released_gym_every`` runs on a released Gym
deployment instead, shaped as NeMo-Gym 0.7.0 sends it over OTLP (tests/fixtures/
gym-0.7.0-otlp-http/): the agent's ``POST /run`` SERVER span over a gym.rollout that names no RL
prompt, each model call an ``HTTP POST`` CLIENT span to the model server (a hop inside the
deployment), its SERVER span, the gym.model.responses span and the ``HTTP POST`` tries to a
model backend, a verify call, and the ASGI receive/send spans under every SERVER span; the
backends are probed (``GET /health``) every 30 s. Among those, one backend answers 500 for a
stretch while its probes pass (a wedged backend), about one call in 2000 is answered 429 on five
tries (a retry storm), and about one /run in 1000 answers 502. Halfway through, no prompt starts
for ``hang_s`` seconds, so nothing commits for longer than the stall timeout (one stall). One
generation shard in 64 goes suspect and dead. The trainer takes a step for every
``prompts_per_step`` prompts started (ten steps at least): a minute of training
(``rl.train_step``) and a weight sync.

    .venv/bin/python benchmarks/synthetic.py OUT.duckdb --spans 10000000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rolloutscope.store import RunStore
from rolloutscope.store.fit import COPIED
from rolloutscope.store.schema import copy_sql

RUN = "synthetic"
T0 = 1_800_000_000 * 10**9
S = 10**9  # spliced into SQL as a BIGINT literal
RL_SPANS_PER_PROMPT = 11.6  # prompt, attempt, deadline, execution, gym.rollout, 6 model calls,
#                             and the parked stays of about two prompts in three
GYM_SPANS_PER_PROMPT = 30  # prompt, attempt, deadline and the released Gym rollout's 27
BACKENDS = 8  # model backends the released Gym deployment's model server calls
WEDGED = BACKENDS - 1  # the backend that answers 500 while its probes pass
GYM_CALLS = 3  # model calls per released Gym rollout


def generate(path: str | Path, *, spans: int = 10_000_000, snapshot_every_s: int = 300,
             shards: int = 64, released_gym_every: int = 8, hang_s: int = 1000,
             commits: int = 1, on_commit=None,
             prompts_per_step: int = 16384, train_steps: bool = True) -> dict[str, int]:
    """Write the run. ``commits`` > 1: the prompts are written in that many commits in start
    order (snapshots, shards and probes first), and the store's maintained rows are derived
    after each, as a collector's writer derives them in passes (``on_commit(i, spans_added,
    derive_s)`` hears of each); else in one, derived when the store closes."""
    from rolloutscope.store import derived

    per_prompt = (RL_SPANS_PER_PROMPT * (released_gym_every - 1) + GYM_SPANS_PER_PROMPT) \
        / released_gym_every
    prompts = max(1, int(spans / per_prompt))
    active_s = max(3600, prompts // 8)  # ~8 prompts started per second, as at 16k in flight
    duration_s = active_s + hang_s
    config = {"rollout": {"rollout_timeout_s": 180.0},
              "checkpoint": {"prepare_timeout_s": 300.0},
              "watchdog": {"stall_timeout_s": 600.0, "interval_s": 30.0},
              "training": {"max_num_steps": 1_000_000}}
    commits = max(1, int(commits))
    with RunStore(path) as store:
        store.register_run(RUN, source="replay", scenario="synthetic", config=config)
        with store.cursor() as con:
            con.execute("SET preserve_insertion_order = false")
            con.execute(_PROMPTS, [prompts, active_s, released_gym_every, hang_s])
            con.execute("ALTER TABLE synthetic_prompts RENAME TO synthetic_all_prompts")
            con.execute(_CHECKPOINTS, [RUN, duration_s // snapshot_every_s, snapshot_every_s])
            con.execute(_SHARDS, [RUN, shards, duration_s])
            con.execute(_PROBES, [RUN, duration_s // 30])
            # a small run still has ten steps
            per_step = min(prompts_per_step, max(1, prompts // 10))
            step_every_s = max(60, round(per_step * active_s / prompts))
            if train_steps:
                con.execute(STEPS, [RUN, active_s // step_every_s, step_every_s,
                                    active_s // 2, hang_s])
            step = -(-prompts // commits)
            for i, lo in enumerate(range(0, prompts, step)):
                before = con.execute("SELECT count(*) FROM spans").fetchall()[0][0]
                con.execute("CREATE OR REPLACE TEMP TABLE synthetic_prompts AS SELECT * FROM "
                            "synthetic_all_prompts WHERE idx >= ? AND idx < ?", [lo, lo + step])
                con.execute(_CALLS_TABLE)
                for sql in (*_RL_INSERTS, *_WRAPPED_INSERTS, *_RELEASED_GYM_INSERTS):
                    con.execute(sql, [RUN])
                con.execute(_EVENTS, [RUN])
                con.execute(_PARKED, [RUN])
                if commits > 1:
                    added = con.execute("SELECT count(*) FROM spans").fetchall()[0][0] - before
                    t0 = time.perf_counter()
                    derived.derive(con)
                    if on_commit is not None:
                        on_commit(i, added, time.perf_counter() - t0)
            con.execute("UPDATE runs SET first_seen_ns = ?, last_seen_ns = ? WHERE run_id = ?",
                        [T0, T0 + (duration_s + 400) * S, RUN])
            counts = dict(con.execute(
                "SELECT 'spans', count(*) FROM spans UNION ALL "
                "SELECT 'span_events', count(*) FROM span_events").fetchall())
            for table in ("synthetic_prompts", "synthetic_all_prompts", "synthetic_calls"):
                con.execute(f"DROP TABLE {table}")
    return counts


# $1 prompts, $2 seconds over which they start, $3 one in how many on released Gym, $4 the hang
_PROMPTS = f"""
CREATE OR REPLACE TEMP TABLE synthetic_prompts AS
SELECT i AS idx,
       {T0}::BIGINT + CAST(i * $2::DOUBLE / $1 * 1e9 AS BIGINT)
           + CASE WHEN i >= $1 // 2 THEN $4::BIGINT * {S} ELSE 0 END AS start_ns,
       CAST((120 + hash(i) % 150) * {S}::BIGINT AS BIGINT) AS dur_ns,
       i % $3 = $3 - 1 AS released_gym,
       i % $3 <> $3 - 1 AND hash(i * 7) % 500 = 0 AS unlucky,
       lpad(to_hex(hash(i)), 16, '0') AS trace_hi,
       i || '-0' AS gym_key,
       hash(i * 11) % 1000 = 0 AS run_failed
FROM range($1) t(i)
"""
# the released Gym rollouts' model calls, and which backend each try reached with what answer
_CALLS_TABLE = f"""
CREATE OR REPLACE TEMP TABLE synthetic_calls AS
WITH calls AS (
    SELECT p.*, c.k,
           p.start_ns + c.k * p.dur_ns // 4 AS call_ns,
           p.dur_ns // 4 - {S}::BIGINT AS call_dur_ns,
           hash(p.idx * 5 + c.k) % 2000 = 0 AS storm,
           hash(p.idx * 3 + c.k) % {BACKENDS} AS backend
    FROM synthetic_prompts p, range({GYM_CALLS}) c(k)
    WHERE p.released_gym
),
stretch AS (SELECT min(start_ns) + (max(start_ns) - min(start_ns)) // 4 AS from_ns,
                   min(start_ns) + (max(start_ns) - min(start_ns)) * 3 // 10 AS to_ns
            FROM synthetic_all_prompts)
SELECT c.*, t.j,
       CASE WHEN c.storm THEN 5 WHEN wedged THEN 2 ELSE 1 END AS tries,
       CASE WHEN wedged AND t.j = 1 THEN 0 ELSE c.backend END AS try_backend,
       CASE WHEN c.storm THEN 429 WHEN wedged AND t.j = 0 THEN 500 ELSE 200 END AS status
FROM (SELECT c.*, c.backend = {WEDGED} AND c.call_ns BETWEEN s.from_ns AND s.to_ns AS wedged
      FROM calls c, stretch s) c,
     range(5) t(j)
WHERE t.j < CASE WHEN c.storm THEN 5 WHEN c.wedged THEN 2 ELSE 1 END
"""

_SPAN_COLS = ("run_id, trace_id, span_id, parent_span_id, name, kind, service, start_ns, end_ns, "
              "status_code, status_message, rollout_id, attempt, prompt_idx, checkpoint_id, "
              "participant_kind, shard_idx, attributes, resource, scope")
# the copied attributes' columns, computed from the JSON by the rules the collector copies them
# by (schema.copy_sql: the same rules, in SQL)
_COPIED_COLS = ", ".join(copy.column for copy in COPIED)
_COPIES = ", ".join(f"{copy_sql(copy)} AS {copy.column}" for copy in COPIED)


def insert_spans(select: str) -> str:
    """INSERT INTO spans of ``select``'s rows (the columns of _SPAN_COLS, its attributes
    named ``attributes``), with their copied attributes."""
    return f"""
INSERT INTO spans ({_SPAN_COLS}, {_COPIED_COLS})
SELECT s.*, {_COPIES}
FROM ({select}) s
"""


def _span_insert(name: str, salt: int, start: str, end: str, attrs: str,
                 service: str = "nemo-rl/controller", copies: int = 1,
                 where: str = "true") -> str:
    return insert_spans(f"""
SELECT ?, p.trace_hi || lpad(to_hex(p.idx), 16, '0'),
       lpad(to_hex(hash(p.idx * 97 + {salt} * 1000003 + c.k)), 16, '0'), NULL,
       '{name}', 'INTERNAL', '{service}', {start}, {end}, 'UNSET', NULL,
       'p' || p.idx, 0, p.idx, NULL, NULL, NULL, {attrs} AS attributes, NULL, 'synthetic'
FROM synthetic_prompts p, range({copies}) c(k)
WHERE {where}""")


_ID = "'nemo.rl.prompt.idx', p.idx, 'nemo.gym.rollout.id', 'p' || p.idx, 'nemo.rl.rollout.attempt', 0"
_RL_INSERTS = [
    _span_insert(
        "rl.rollout.prompt", 1, "p.start_ns", "p.start_ns + p.dur_ns",
        f"json_object({_ID}, 'nemo.rl.rollout.outcome', 'committed')::VARCHAR"),
    _span_insert(
        "rl.rollout.attempt", 2, "p.start_ns", "p.start_ns + p.dur_ns",
        # as the SDK exports them: a failure's attributes only on the failed try
        f"""CASE WHEN p.unlucky
             THEN json_object({_ID}, 'nemo.rl.group.id', 'g' || p.idx,
                              'nemo.rl.rollout.outcome', 'failed',
                              'nemo.rl.failure.class', 'infra',
                              'nemo.rl.failure.reason', 'RolloutTimeout')
             ELSE json_object({_ID}, 'nemo.rl.group.id', 'g' || p.idx,
                              'nemo.rl.rollout.outcome', 'committed') END::VARCHAR"""),
    _span_insert(
        "rl.deadline", 3, "p.start_ns",
        f"CASE WHEN p.unlucky THEN p.start_ns + 180 * {S}::BIGINT ELSE p.start_ns + p.dur_ns END",
        f"json_object({_ID}, 'nemo.rl.deadline.kind', 'rollout', 'nemo.rl.deadline.budget_s', "
        "180.0, 'nemo.rl.deadline.outcome', CASE WHEN p.unlucky THEN 'fired' ELSE 'completed' "
        "END)::VARCHAR"),
]
# the Gym side of a prompt run through rolloutscope's wrappers
_WRAPPED_INSERTS = [
    _span_insert(
        "gym.agent.execution", 4, "p.start_ns", "p.start_ns + p.dur_ns",
        f"json_object({_ID}, 'nemo.gym.agent.execution.state', 'completed')::VARCHAR",
        service="nemo-gym/agent", where="NOT p.released_gym"),
    _span_insert(
        "gym.rollout", 5, "p.start_ns", "p.start_ns + p.dur_ns",
        f"json_object({_ID})::VARCHAR", service="nemo-gym/agent", where="NOT p.released_gym"),
    _span_insert(
        "gym.model.responses", 6, "p.start_ns + c.k * p.dur_ns // 6",
        f"p.start_ns + (c.k + 1) * p.dur_ns // 6 - {S}::BIGINT",
        f"json_object({_ID}, 'gen_ai.usage.input_tokens', 800, "
        "'gen_ai.usage.output_tokens', 2048)::VARCHAR", service="nemo-gym/policy", copies=6,
        where="NOT p.released_gym"),
]


# -- a released Gym deployment's rollouts ------------------------------------------------------
AGENT = "10.0.0.1:8001"
MODEL_SERVER = "10.0.0.2:8000"
RESOURCES = "10.0.0.3:8002"


def _resource(server: str, server_type: str) -> str:
    return json.dumps({"service.name": f"nemo-gym/{server}", "nemo.gym.server.name": server,
                       "nemo.gym.server.type": server_type, "nemo.gym.version": "0.7.0",
                       "service.instance.id": "synthetic-rank0",
                       "telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry",
                       "telemetry.sdk.version": "1.39.1"}, separators=(",", ":"))


_GYM_SERVICES = {
    "agent": ("nemo-gym/simple_agent", _resource("simple_agent", "responses_api_agents")),
    "model": ("nemo-gym/policy_model", _resource("policy_model", "responses_api_models")),
    "resources": ("nemo-gym/example_resources",
                  _resource("example_resources", "resources_servers")),
}


def _sid(role: int, k: str = "0", j: str = "0") -> str:
    """A span id of a released Gym rollout's span: its role, call and try."""
    return f"lpad(to_hex(hash(p.idx * 131 + {role} * 7919 + ({k}) * 101 + ({j}))), 16, '0')"


def _gym_span(name: str, kind: str, service: str, span_id: str, parent: str | None,
              start: str, end: str, attrs: str, *, rollout: bool = False,
              status: str = "'UNSET'", source: str = "synthetic_prompts p",
              where: str = "true", scope: str = "nemo.gym") -> str:
    svc, resource = _GYM_SERVICES[service]
    return insert_spans(f"""
SELECT ?, lpad(to_hex(hash(p.idx * 3 + 1)), 16, '0') || lpad(to_hex(p.idx), 16, '0'),
       {span_id}, {parent or 'NULL'}, {name}, '{kind}', '{svc}', {start}, {end}, {status}, NULL,
       {'p.gym_key' if rollout else 'NULL'}, NULL, NULL, NULL, NULL, NULL, {attrs} AS attributes,
       '{resource}', '{scope}'
FROM {source}
WHERE p.released_gym AND {where}""")


def _server_attrs(authority: str, target: str, status: str) -> str:
    return (f"json_object('http.scheme', 'http', 'http.host', '{authority}', 'http.flavor', "
            f"'1.1', 'http.target', {target}, 'http.url', 'http://{authority}' || {target}, "
            f"'http.method', 'POST', 'http.server_name', '{authority}', "
            f"'http.status_code', {status})::VARCHAR")


def _client_attrs(url: str, status: str, rollout: bool = True) -> str:
    key = ", 'nemo.gym.rollout.id', p.gym_key" if rollout else ""
    return (f"json_object('http.request.method', 'POST', 'url.full', {url}{key}, "
            f"'http.response.status_code', {status})::VARCHAR")


def _asgi(name: str, service: str, parent: str, start: str, end: str, role: int,
          source: str = "synthetic_prompts p", where: str = "true", k: str = "0") -> list[str]:
    """The ASGI instrumentation's receive and send spans under a SERVER span."""
    return [
        _gym_span(f"{name} || ' http receive'", "INTERNAL", service, _sid(role, k), parent,
                  f"{start} + 1000000", f"{start} + 1050000",
                  "'{\"asgi.event.type\":\"http.request\"}'", source=source, where=where,
                  scope="opentelemetry.instrumentation.fastapi"),
        _gym_span(f"{name} || ' http send'", "INTERNAL", service, _sid(role + 1, k), parent,
                  f"{end} - 2000000", f"{end} - 1950000",
                  "'{\"asgi.event.type\":\"http.response.start\",\"http.status_code\":200}'",
                  source=source, where=where, scope="opentelemetry.instrumentation.fastapi"),
    ]


_RUN_STATUS = "CASE WHEN p.run_failed THEN 502 ELSE 200 END"
_CALLS = "synthetic_calls p"  # one row per try of a call
_FIRST = "p.j = 0"  # one row per call
_CALL_END = "p.call_ns + p.call_dur_ns"
_TRY_START = "p.call_ns + 3000000 + p.j * (p.call_dur_ns // p.tries)"
_TRY_END = "p.call_ns + (p.j + 1) * (p.call_dur_ns // p.tries) - 3000000"
_RELEASED_GYM_INSERTS = [
    # the agent's /run, and the rollout under it
    _gym_span("'POST /run'", "SERVER", "agent", _sid(1), None, "p.start_ns",
              "p.start_ns + p.dur_ns", _server_attrs(AGENT, "'/run'", _RUN_STATUS),
              status="CASE WHEN p.run_failed THEN 'ERROR' ELSE 'UNSET' END",
              scope="opentelemetry.instrumentation.fastapi"),
    *_asgi("'POST /run'", "agent", _sid(1), "p.start_ns", "p.start_ns + p.dur_ns", 2),
    _gym_span("'gym.rollout'", "INTERNAL", "agent", _sid(4), _sid(1), "p.start_ns + 2000000",
              "p.start_ns + p.dur_ns - 3000000",
              "json_object('nemo.gym.server.name', 'simple_agent', "
              "'nemo.gym.rollout.id', p.gym_key)::VARCHAR", rollout=True,
              scope="nemo.lens.helpers"),
    # each model call: the agent's request to the model server, the server's span, its
    # gym.model.responses span and the tries to a backend under that
    _gym_span("'HTTP POST'", "CLIENT", "agent", _sid(10, "p.k"), _sid(4), "p.call_ns",
              _CALL_END, _client_attrs(f"'http://{MODEL_SERVER}/ng-rollout/' || p.gym_key || "
                                       "'/v1/responses'", "200"),
              rollout=True, source=_CALLS, where=_FIRST),
    _gym_span("'POST'", "SERVER", "model", _sid(11, "p.k"), _sid(10, "p.k"),
              "p.call_ns + 1000000", f"{_CALL_END} - 1000000",
              _server_attrs(MODEL_SERVER, "'/ng-rollout/' || p.gym_key || '/v1/responses'",
                            "200"),
              source=_CALLS, where=_FIRST,
              scope="opentelemetry.instrumentation.fastapi"),
    *_asgi("'POST'", "model", _sid(11, "p.k"), "p.call_ns + 1000000",
           f"{_CALL_END} - 1000000", 12, source=_CALLS, where=_FIRST, k="p.k"),
    _gym_span("'gym.model.responses'", "INTERNAL", "model", _sid(14, "p.k"), _sid(11, "p.k"),
              "p.call_ns + 2000000", f"{_CALL_END} - 2000000",
              "json_object('nemo.gym.server.name', 'policy_model', "
              "'nemo.gym.rollout.id', p.gym_key)::VARCHAR", rollout=True,
              source=_CALLS, where=_FIRST, scope="nemo.lens.helpers"),
    _gym_span("'HTTP POST'", "CLIENT", "model", _sid(15, "p.k", "p.j"), _sid(14, "p.k"),
              _TRY_START, _TRY_END,
              _client_attrs("'http://10.1.0.' || p.try_backend || ':8000/v1/responses'",
                            "p.status"),
              rollout=True, source=_CALLS),
    # the verify call to the resources server, in the rollout's last quarter
    _gym_span("'HTTP POST'", "CLIENT", "agent", _sid(20), _sid(4),
              "p.start_ns + 3 * p.dur_ns // 4", "p.start_ns + p.dur_ns - 4000000",
              _client_attrs(f"'http://{RESOURCES}/verify'", "200"), rollout=True),
    _gym_span("'POST /verify'", "SERVER", "resources", _sid(21), _sid(20),
              "p.start_ns + 3 * p.dur_ns // 4 + 1000000", "p.start_ns + p.dur_ns - 5000000",
              _server_attrs(RESOURCES, "'/verify'", "200"),
              scope="opentelemetry.instrumentation.fastapi"),
    *_asgi("'POST /verify'", "resources", _sid(21), "p.start_ns + 3 * p.dur_ns // 4 + 1000000",
           "p.start_ns + p.dur_ns - 5000000", 22),
    _gym_span("'gym.verify'", "INTERNAL", "resources", _sid(24), _sid(21),
              "p.start_ns + 3 * p.dur_ns // 4 + 2000000", "p.start_ns + p.dur_ns - 6000000",
              "json_object('nemo.gym.server.name', 'example_resources', "
              "'nemo.gym.rollout.id', p.gym_key)::VARCHAR", rollout=True,
              scope="nemo.lens.helpers"),
]
# liveness probes of every model backend, every 30 s; the wedged backend passes them all
_PROBES = insert_spans(f"""
SELECT $1, lpad(to_hex(2000000 + b.b), 16, '0') || lpad(to_hex(t.i), 16, '0'),
       lpad(to_hex(hash(t.i * 17 + b.b)), 16, '0'), NULL, 'HTTP GET', 'CLIENT',
       'nemo-rl/controller', {T0} + t.i * 30 * {S}::BIGINT,
       {T0} + t.i * 30 * {S}::BIGINT + 10000000, 'UNSET', NULL, NULL, NULL, NULL, NULL, NULL,
       NULL,
       json_object('http.request.method', 'GET',
                   'url.full', 'http://10.1.0.' || b.b || ':8000/health',
                   'http.response.status_code', 200)::VARCHAR AS attributes, NULL, 'synthetic'
FROM range($2) t(i), range({BACKENDS}) b(b)""")

_EVENTS = f"""
INSERT INTO span_events
SELECT ?, s.trace_id, s.span_id, s.name, e.name, e.ts, s.rollout_id, s.attempt, s.prompt_idx,
       NULL, NULL, NULL
FROM spans s
JOIN synthetic_prompts p ON p.idx = s.prompt_idx
CROSS JOIN LATERAL (
    SELECT 'gym.agent.completed' AS name, s.end_ns AS ts
    UNION ALL
    SELECT 'gym.agent.acknowledged', s.end_ns + {S}::BIGINT WHERE NOT p.unlucky
) e
WHERE s.name = 'gym.agent.execution'
"""

_CHECKPOINTS = insert_spans(f"""
SELECT $1, lpad(to_hex(k.i), 32, '0'), lpad(to_hex(k.i * 16 + ph.j), 16, '0'), NULL,
       ph.name, 'INTERNAL', 'nemo-rl/controller',
       {T0} + k.i * $3::BIGINT * {S}::BIGINT, {T0} + k.i * $3::BIGINT * {S}::BIGINT + 60 * {S}::BIGINT,
       'UNSET', NULL, NULL, NULL, NULL, 'ck' || k.i, ph.kind, NULL,
       json_object('nemo.gym.checkpoint.id', 'ck' || k.i,
                   'nemo.gym.checkpoint.participant_kind', ph.kind,
                   'nemo.rl.fence.owner', 'gym_checkpoint',
                   'nemo.rl.snapshot.outcome', 'published',
                   'nemo.gym.checkpoint.outcome', 'ok')::VARCHAR AS attributes, NULL, 'synthetic'
FROM range(1, $2 + 1) k(i),
     (VALUES (0, 'rl.admission.fence', NULL), (1, 'rl.rollout_snapshot', NULL),
             (2, 'gym.checkpoint.prepare', 'model'), (3, 'gym.checkpoint.prepare', 'agent'),
             (4, 'gym.checkpoint.commit', 'agent'), (5, 'gym.checkpoint.resume', 'agent'),
             (6, 'gym.checkpoint.coordinate.commit', 'controller')) ph(j, name, kind)""")

# the trainer: train step k trains for a minute from k * $3 seconds (a batch of prompts_per_step
# prompts at the rate they start), then syncs its weights for 5 s: rolloutscope's rl.train_step
# and rl.weight_sync spans ('rl' dialect of train_steps); $2 steps. From $4 s on, $5 s later:
# while no prompt starts (the hang), no step trains either
STEPS = insert_spans(f"""
SELECT $1, 'f' || lpad(to_hex(k.i), 31, '0'), lpad(to_hex(k.i * 16 + ph.j), 16, '0'), NULL,
       ph.name, 'INTERNAL', 'nemo-rl/trainer',
       {T0} + (k.i * $3::BIGINT + ph.from_s + CASE WHEN k.i * $3 >= $4 THEN $5 ELSE 0 END)
           * {S}::BIGINT,
       {T0} + (k.i * $3::BIGINT + ph.to_s + CASE WHEN k.i * $3 >= $4 THEN $5 ELSE 0 END)
           * {S}::BIGINT,
       'UNSET', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       json_object('nemo.rl.train.step', k.i - 1, 'nemo.rl.weight_version', k.i)::VARCHAR
           AS attributes, NULL, 'synthetic'
FROM range(1, $2 + 1) k(i),
     (VALUES (0, 'rl.train_step', 0, 60), (1, 'rl.weight_sync', 60, 65)) ph(j, name, from_s, to_s)""")

# the wrapped prompts in flight at a snapshot are parked for it
_PARKED = insert_spans(f"""
SELECT ?, p.trace_hi || lpad(to_hex(p.idx), 16, '0'),
       lpad(to_hex(hash(p.idx * 131 + 17)), 16, '0'), NULL, 'gym.agent.parked', 'INTERNAL',
       'nemo-gym/agent', w.start_ns + {S}::BIGINT, w.start_ns + 60 * {S}::BIGINT, 'UNSET', NULL,
       'p' || p.idx, 0, p.idx, w.ck, NULL, NULL,
       json_object('nemo.gym.rollout.id', 'p' || p.idx, 'nemo.rl.prompt.idx', p.idx,
                   'nemo.rl.rollout.attempt', 0, 'nemo.gym.checkpoint.id', w.ck,
                   'nemo.gym.agent.parked_boundary_state', 'parked_with_boundary')::VARCHAR
           AS attributes,
       NULL, 'synthetic'
FROM synthetic_prompts p
JOIN (SELECT checkpoint_id AS ck, start_ns FROM spans WHERE name = 'rl.admission.fence') w
  ON w.start_ns BETWEEN p.start_ns AND p.start_ns + p.dur_ns
 AND (NOT p.unlucky OR p.start_ns + 180 * {S}::BIGINT BETWEEN w.start_ns + {S}::BIGINT AND w.start_ns + 60 * {S}::BIGINT)
WHERE (p.start_ns + 180 * {S}::BIGINT > w.start_ns OR NOT p.unlucky) AND NOT p.released_gym""")

_SHARDS = insert_spans(f"""
SELECT $1, lpad(to_hex(1000000 + s.i), 32, '0'), lpad(to_hex(1000000 + s.i * 4 + st.j), 16, '0'),
       NULL, 'rl.gen_fleet.shard_state', 'INTERNAL', 'nemo-rl/controller',
       {T0} + st.from_frac * $3::BIGINT * {S}::BIGINT // 100,
       CASE WHEN st.to_frac IS NULL THEN NULL ELSE {T0} + st.to_frac * $3::BIGINT * {S}::BIGINT // 100 END,
       'UNSET', NULL, NULL, NULL, NULL, NULL, NULL, s.i,
       json_object('nemo.rl.gen.shard.idx', s.i, 'nemo.rl.gen_fleet.state', st.state,
                   'nemo.rl.gen_fleet.previous_state', st.prev,
                   'nemo.rl.gen_fleet.trigger', st.trig,
                   'nemo.rl.gen_fleet.membership_epoch', st.j,
                   'nemo.rl.gen_fleet.weight_version', 1)::VARCHAR AS attributes, NULL,
       'synthetic'
FROM range($2) s(i),
     (VALUES (0, 'healthy', NULL, 'initial', 0, 50), (1, 'suspect', 'healthy', 'probe_failure', 50, 51),
             (2, 'dead', 'suspect', 'probe_failure', 51, 100)) st(j, state, prev, trig, from_frac, to_frac)
WHERE s.i = 0 OR st.j = 0""")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--spans", type=int, default=10_000_000)
    ap.add_argument("--commits", type=int, default=1,
                    help="write the prompts in this many commits, deriving after each (as a "
                         "collector's writer does), and print each pass's cost")
    args = ap.parse_args()
    t = time.perf_counter()
    passes: list[tuple[int, float]] = []

    def heard(i: int, added: int, derive_s: float) -> None:
        passes.append((added, derive_s))
        print(f"commit {i + 1}/{args.commits}: {added:,} spans, derived in {derive_s:.2f} s "
              f"({derive_s / max(added, 1) * 1e6:.2f} us a span)", flush=True)

    counts = generate(args.out, spans=args.spans, commits=args.commits, on_commit=heard)
    print(json.dumps(counts), f"in {time.perf_counter() - t:.1f} s")
    if passes:
        added, spent = sum(a for a, _ in passes), sum(s for _, s in passes)
        print(f"derivation: {spent:.1f} s over {added:,} spans in {len(passes)} passes = "
              f"{spent / max(added, 1) * 1e6:.2f} us a span")


if __name__ == "__main__":
    main()
