"""One store file with an incident of every kind: the built-in scenarios replayed on the virtual
clock (a run each, named after the scenario; tests/replay/test_scenario_incidents.py maps
scenario -> kinds), and a run built span by span through the real SDK for the five kinds no
scenario produces (router/fleet divergence from the watchdog's metrics, a late retired attempt,
a context-length data failure, an environment health failure, degraded generation cuts), and a
run of engines scraped behind healthy shards for the three engine kinds
(tests/engine_metrics.py)."""

from __future__ import annotations

from pathlib import Path

from rolloutscope.collectors.exporter import instrument
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RowBatch, RunStore
from rolloutscope.vocabulary import Attr, EventName, IncidentKind, SpanName
from tests.engine_metrics import write_engine_run
from tests.store.conftest import S, T0, SpanKit

SCENARIOS = ("stale-weights-serving", "demo", "wedged-engine", "retry-504-storm",
             "prepare-blocked-by-streaming", "worker-lost-in-commit", "lease-expiry",
             "chaos-kill-idle")
HAND_BUILT = "hand-built"
ENGINES = "engines"


def _hand_built(kit: SpanKit) -> None:
    kit.inst.store.register_run(HAND_BUILT, config={"watchdog": {"interval_s": 30.0}})
    kit.span(SpanName.RL_TRAIN_STEP, 0, 1, {Attr.TRAIN_STEP: 1})
    # a context-length 400 on every try: the trainer's sequence length exceeds the engine's
    for k in range(2):
        kit.span(SpanName.RL_ATTEMPT, 10 + 20 * k, 20 + 20 * k, {
            Attr.ROLLOUT_ID: "p1", Attr.PROMPT_IDX: 1, Attr.RL_ATTEMPT: k,
            Attr.ROLLOUT_OUTCOME: "failed", Attr.FAILURE_CLASS: "data",
            Attr.FAILURE_HTTP_STATUS: 400,
            Attr.FAILURE_DETAIL: "This model's maximum context length is 4096 tokens"},
            error="data failure")
    # degraded cuts at a prepare
    kit.span(SpanName.CK_PREPARE, 80, 81, {
        Attr.CHECKPOINT_ID: "ck3", Attr.CK_PARTICIPANT_KIND: "model", Attr.CK_OUTCOME: "ok",
        Attr.CK_COUNT_CUT_FAILED: 1, Attr.CK_COUNT_CUT_SKIPPED: 2})
    # a retired attempt's late request, refused
    kit.span(SpanName.RL_ATTEMPT, 90, 95, {Attr.ROLLOUT_ID: "p9", Attr.PROMPT_IDX: 9,
                                           Attr.RL_ATTEMPT: 0, Attr.ROLLOUT_OUTCOME: "failed",
                                           Attr.FAILURE_CLASS: "infra",
                                           Attr.FAILURE_REASON: "RolloutTimeout"})
    kit.span("HTTP POST", 100, 101, {}, events=[
        (EventName.CK_REFUSED, 100.5, {Attr.CK_CODE: "stale_attempt", Attr.ROLLOUT_ID: "p9",
                                       Attr.RL_ATTEMPT: 0})])
    # the environment's health check fails at a watchdog tick
    kit.span(SpanName.RL_STALL_WATCHDOG_TICK, 120, 121, {}, events=[
        (EventName.ENV_HEALTH_PROBLEM, 120, {Attr.ENV_NAME: "math",
                                             Attr.ENV_PROBLEM: "did not answer"})])
    kit.span(SpanName.RL_TRAIN_STEP, 200, 201, {Attr.TRAIN_STEP: 2})
    kit.flush()
    # the router serves more backends than the fleet counts (a restarted router)
    batch = RowBatch()
    for ts, router, fleet in ((30, 2, 2), (60, 2, 1), (90, 2, 1), (120, 1, 1)):
        for name, value in (("router/serving_backends", router),
                            ("gen_fleet/serving_shards", fleet)):
            batch.add_row("metrics", run_id=HAND_BUILT, name=name, kind="scalar",
                          ts_ns=T0 + ts * S, value=float(value))
    kit.inst.store.writer().write(batch)


def build_zoo(path: Path) -> dict[str, tuple[str, str]]:
    """Write the zoo to ``path``; for each incident kind, (run id, incident id) of one."""
    with RunStore(path) as store:
        for name in SCENARIOS:
            replay_into_store(get(name), store, run_id=name)
    inst = instrument(path, service_name="tests", run_id=HAND_BUILT)
    try:
        _hand_built(SpanKit(inst))
        assert inst.flush()
    finally:
        inst.shutdown()
    inst = instrument(path, service_name="tests", run_id=ENGINES)
    try:
        write_engine_run(SpanKit(inst), ENGINES, t0_ns=T0)
        assert inst.flush()
    finally:
        inst.shutdown()
    with RunStore(path, read_only=True) as store:
        rows = store.query("SELECT kind, run_id, incident_id FROM incidents "
                           "ORDER BY kind, run_id = 'demo' DESC, start_ns")
    chosen: dict[str, tuple[str, str]] = {}
    for kind, run_id, incident_id in rows:
        chosen.setdefault(kind, (run_id, incident_id))
    missing = {k.value for k in IncidentKind} - set(chosen)
    assert not missing, f"the zoo has no incident of kind(s) {sorted(missing)}"
    return chosen
