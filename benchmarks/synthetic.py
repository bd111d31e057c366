"""A synthetic run of any size, written straight into a run store with DuckDB SQL.

Not a replay (the engine makes realistic runs, but 10M spans through the SDK take minutes): a
bulk generator for the size benchmarks. Per prompt: the prompt span, one RL try, its deadline, the
agent execution with its completion (and usually its ACK), the released gym.rollout span and a
few model calls; a snapshot every ``snapshot_every_s`` parks what is in flight; one generation
shard in 64 goes suspect and dead. About one prompt in 500 has its deadline fire while parked and
its completion left unacknowledged, so the incident views have work to do.

    .venv/bin/python benchmarks/synthetic.py OUT.duckdb --spans 10000000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rolloutscope.store import RunStore

RUN = "synthetic"
T0 = 1_800_000_000 * 10**9
S = 10**9  # spliced into SQL as a BIGINT literal
SPANS_PER_PROMPT = 11  # prompt, attempt, deadline, execution, gym.rollout, 6 model calls


def generate(path: str | Path, *, spans: int = 10_000_000, snapshot_every_s: int = 300,
             shards: int = 64) -> dict[str, int]:
    prompts = max(1, spans // SPANS_PER_PROMPT)
    duration_s = max(3600, prompts // 8)  # ~8 prompts started per second, as at 16k in flight
    config = {"rollout": {"rollout_timeout_s": 180.0},
              "checkpoint": {"prepare_timeout_s": 300.0},
              "watchdog": {"stall_timeout_s": 600.0, "interval_s": 30.0},
              "training": {"max_num_steps": 1_000_000}}
    with RunStore(path) as store:
        store.register_run(RUN, source="replay", scenario="synthetic", config=config)
        with store.cursor() as con:
            con.execute("SET preserve_insertion_order = false")
            con.execute(_PROMPTS, [prompts, duration_s])
            for name, sql in _SPAN_INSERTS:
                con.execute(sql, [RUN])
            con.execute(_EVENTS, [RUN])
            con.execute(_CHECKPOINTS, [RUN, duration_s // snapshot_every_s, snapshot_every_s])
            con.execute(_PARKED, [RUN])
            con.execute(_SHARDS, [RUN, shards, duration_s])
            con.execute("UPDATE runs SET first_seen_ns = ?, last_seen_ns = ? WHERE run_id = ?",
                        [T0, T0 + (duration_s + 400) * S, RUN])
            counts = dict(con.execute(
                "SELECT 'spans', count(*) FROM spans UNION ALL "
                "SELECT 'span_events', count(*) FROM span_events").fetchall())
            con.execute("DROP TABLE synthetic_prompts")
    return counts


_PROMPTS = f"""
CREATE OR REPLACE TEMP TABLE synthetic_prompts AS
SELECT i AS idx,
       {T0}::BIGINT + CAST(i * $2::DOUBLE / $1 * 1e9 AS BIGINT) AS start_ns,
       CAST((120 + hash(i) % 150) * {S}::BIGINT AS BIGINT) AS dur_ns,
       hash(i * 7) % 500 = 0 AS unlucky,
       lpad(to_hex(hash(i)), 16, '0') AS trace_hi
FROM range($1) t(i)
"""

_SPAN_COLS = ("run_id, trace_id, span_id, parent_span_id, name, kind, service, start_ns, end_ns, "
              "status_code, status_message, rollout_id, attempt, prompt_idx, checkpoint_id, "
              "participant_kind, shard_idx, attributes, resource, scope")


def _span_insert(name: str, salt: int, start: str, end: str, attrs: str,
                 service: str = "nemo-rl/controller", copies: int = 1) -> str:
    return f"""
INSERT INTO spans ({_SPAN_COLS})
SELECT ?, p.trace_hi || lpad(to_hex(p.idx), 16, '0'),
       lpad(to_hex(hash(p.idx * 97 + {salt} * 1000003 + c.k)), 16, '0'), NULL,
       '{name}', 'INTERNAL', '{service}', {start}, {end}, 'UNSET', NULL,
       'p' || p.idx, 0, p.idx, NULL, NULL, NULL, {attrs}, NULL, 'synthetic'
FROM synthetic_prompts p, range({copies}) c(k)
"""


_ID = "'nemo.rl.prompt.idx', p.idx, 'nemo.gym.rollout.id', 'p' || p.idx, 'nemo.rl.rollout.attempt', 0"
_SPAN_INSERTS = [
    ("prompt", _span_insert(
        "rl.rollout.prompt", 1, "p.start_ns", "p.start_ns + p.dur_ns",
        f"json_object({_ID}, 'nemo.rl.rollout.outcome', 'committed')::VARCHAR")),
    ("attempt", _span_insert(
        "rl.rollout.attempt", 2, "p.start_ns", "p.start_ns + p.dur_ns",
        f"json_object({_ID}, 'nemo.rl.group.id', 'g' || p.idx, 'nemo.rl.rollout.outcome', "
        "CASE WHEN p.unlucky THEN 'failed' ELSE 'committed' END, 'nemo.rl.failure.class', "
        "CASE WHEN p.unlucky THEN 'infra' END, 'nemo.rl.failure.reason', "
        "CASE WHEN p.unlucky THEN 'RolloutTimeout' END)::VARCHAR")),
    ("deadline", _span_insert(
        "rl.deadline", 3, "p.start_ns",
        f"CASE WHEN p.unlucky THEN p.start_ns + 180 * {S}::BIGINT ELSE p.start_ns + p.dur_ns END",
        f"json_object({_ID}, 'nemo.rl.deadline.kind', 'rollout', 'nemo.rl.deadline.budget_s', "
        "180.0, 'nemo.rl.deadline.outcome', CASE WHEN p.unlucky THEN 'fired' ELSE 'completed' "
        "END)::VARCHAR")),
    ("execution", _span_insert(
        "gym.agent.execution", 4, "p.start_ns", "p.start_ns + p.dur_ns",
        f"json_object({_ID}, 'nemo.gym.agent.execution.state', 'completed')::VARCHAR",
        service="nemo-gym/agent")),
    ("gym.rollout", _span_insert(
        "gym.rollout", 5, "p.start_ns", "p.start_ns + p.dur_ns",
        f"json_object({_ID})::VARCHAR", service="nemo-gym/agent")),
    ("model calls", _span_insert(
        "gym.model.responses", 6, f"p.start_ns + c.k * p.dur_ns // 6",
        f"p.start_ns + (c.k + 1) * p.dur_ns // 6 - {S}::BIGINT",
        f"json_object({_ID}, 'gen_ai.usage.input_tokens', 800, "
        "'gen_ai.usage.output_tokens', 2048)::VARCHAR", service="nemo-gym/policy", copies=6)),
]

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

_CHECKPOINTS = f"""
INSERT INTO spans ({_SPAN_COLS})
SELECT $1, lpad(to_hex(k.i), 32, '0'), lpad(to_hex(k.i * 16 + ph.j), 16, '0'), NULL,
       ph.name, 'INTERNAL', 'nemo-rl/controller',
       {T0} + k.i * $3::BIGINT * {S}::BIGINT, {T0} + k.i * $3::BIGINT * {S}::BIGINT + 60 * {S}::BIGINT,
       'UNSET', NULL, NULL, NULL, NULL, 'ck' || k.i, ph.kind, NULL,
       json_object('nemo.gym.checkpoint.id', 'ck' || k.i,
                   'nemo.gym.checkpoint.participant_kind', ph.kind,
                   'nemo.rl.fence.owner', 'gym_checkpoint',
                   'nemo.rl.snapshot.outcome', 'published',
                   'nemo.gym.checkpoint.outcome', 'ok')::VARCHAR, NULL, 'synthetic'
FROM range(1, $2 + 1) k(i),
     (VALUES (0, 'rl.admission.fence', NULL), (1, 'rl.rollout_snapshot', NULL),
             (2, 'gym.checkpoint.prepare', 'model'), (3, 'gym.checkpoint.prepare', 'agent'),
             (4, 'gym.checkpoint.commit', 'agent'), (5, 'gym.checkpoint.resume', 'agent'),
             (6, 'gym.checkpoint.coordinate.commit', 'controller')) ph(j, name, kind)
"""

_PARKED = f"""
INSERT INTO spans ({_SPAN_COLS})
SELECT ?, p.trace_hi || lpad(to_hex(p.idx), 16, '0'),
       lpad(to_hex(hash(p.idx * 131 + 17)), 16, '0'), NULL, 'gym.agent.parked', 'INTERNAL',
       'nemo-gym/agent', w.start_ns + {S}::BIGINT, w.start_ns + 60 * {S}::BIGINT, 'UNSET', NULL,
       'p' || p.idx, 0, p.idx, w.ck, NULL, NULL,
       json_object('nemo.gym.rollout.id', 'p' || p.idx, 'nemo.rl.prompt.idx', p.idx,
                   'nemo.rl.rollout.attempt', 0, 'nemo.gym.checkpoint.id', w.ck,
                   'nemo.gym.agent.parked_boundary_state', 'parked_with_boundary')::VARCHAR,
       NULL, 'synthetic'
FROM synthetic_prompts p
JOIN (SELECT checkpoint_id AS ck, start_ns FROM spans WHERE name = 'rl.admission.fence') w
  ON w.start_ns BETWEEN p.start_ns AND p.start_ns + p.dur_ns
 AND (NOT p.unlucky OR p.start_ns + 180 * {S}::BIGINT BETWEEN w.start_ns + {S}::BIGINT AND w.start_ns + 60 * {S}::BIGINT)
WHERE p.start_ns + 180 * {S}::BIGINT > w.start_ns OR NOT p.unlucky
"""

_SHARDS = f"""
INSERT INTO spans ({_SPAN_COLS})
SELECT $1, lpad(to_hex(1000000 + s.i), 32, '0'), lpad(to_hex(1000000 + s.i * 4 + st.j), 16, '0'),
       NULL, 'rl.gen_fleet.shard_state', 'INTERNAL', 'nemo-rl/controller',
       {T0} + st.from_frac * $3::BIGINT * {S}::BIGINT // 100,
       CASE WHEN st.to_frac IS NULL THEN NULL ELSE {T0} + st.to_frac * $3::BIGINT * {S}::BIGINT // 100 END,
       'UNSET', NULL, NULL, NULL, NULL, NULL, NULL, s.i,
       json_object('nemo.rl.gen.shard.idx', s.i, 'nemo.rl.gen_fleet.state', st.state,
                   'nemo.rl.gen_fleet.previous_state', st.prev,
                   'nemo.rl.gen_fleet.trigger', st.trig,
                   'nemo.rl.gen_fleet.membership_epoch', st.j,
                   'nemo.rl.gen_fleet.weight_version', 1)::VARCHAR, NULL, 'synthetic'
FROM range($2) s(i),
     (VALUES (0, 'healthy', NULL, 'initial', 0, 50), (1, 'suspect', 'healthy', 'probe_failure', 50, 51),
             (2, 'dead', 'suspect', 'probe_failure', 51, 100)) st(j, state, prev, trig, from_frac, to_frac)
WHERE s.i = 0 OR st.j = 0
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--spans", type=int, default=10_000_000)
    args = ap.parse_args()
    t = time.perf_counter()
    counts = generate(args.out, spans=args.spans)
    print(json.dumps(counts), f"in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
