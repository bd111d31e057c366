"""A run told the way NVIDIA-NeMo/RL #4266's incident write-up tells P1, built through the real
OTel SDK into a real store file.

Timeline (seconds after T0): rollouts r-0..r-11 start in the first minute with a 180 s rollout
deadline. Snapshot 1 closes admission at 150 s and commits at 210 s; it parks r-7 try 0, whose
deadline fires at 180 s while parked. RL starts try 1; Gym finishes try 0 at 240 s and nobody
acknowledges it. Snapshot 2 at 450 s waits out prepare_timeout_s (300 s) and fails. Shard 3
goes suspect at 300 s and dead at 320 s (quarantined; its error text carries markup). Training
stops after 300 s: a stall until the run's end at 800 s. r-9 fails on a data error whose reason
carries a ``<script>`` tag.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest
from opentelemetry.trace import SpanKind

from rolloutscope.collectors.exporter import instrument
from rolloutscope.dashboard import time_figures as tf
from rolloutscope.dashboard import timeline_plot as tl
from rolloutscope.store import RunStore
from tests.store_kinds import STORE_KINDS, store_target
from rolloutscope.vocabulary import Attr, EventName, SpanName, VllmAttr
from tests.engine_metrics import ENGINES, write_engine_run
from tests.store.conftest import S, T0, SpanKit

RUN = "run-p1"
CK1 = "rollout-step-0-snapshot-1"
CK2 = "rollout-step-0-snapshot-2"
SCRIPT = "<script>window.__pwned = 1</script><b>bold</b>"
SHARD_ERROR = f"ActorDiedError {SCRIPT}"
DATA_REASON = f"RolloutDataFailure {SCRIPT}"
END_S = 800.0


def ns(seconds: float) -> int:
    return T0 + int(seconds * S)


def build_p1_run(kit: SpanKit) -> None:
    kit.inst.store.register_run(RUN, config={
        "rollout": {"rollout_timeout_s": 180.0},
        "checkpoint": {"prepare_timeout_s": 300.0},
        "watchdog": {"stall_timeout_s": 120.0},
        "training": {"max_num_steps": 100}})

    # fleet: four shards, shard 3 quarantined
    def shard(idx, state, start, end, trigger, prev=None, **extra):
        attrs = {Attr.SHARD_IDX: idx, Attr.FLEET_STATE: state, Attr.FLEET_TRIGGER: trigger,
                 Attr.FLEET_MEMBERSHIP_EPOCH: 1 if start < 320 else 2, **extra}
        if prev:
            attrs[Attr.FLEET_PREVIOUS_STATE] = prev
        if end is None:
            kit.open(SpanName.SHARD_STATE, start, attrs)
        else:
            kit.span(SpanName.SHARD_STATE, start, end, attrs)

    for i in range(3):
        shard(i, "healthy", 0, None, "initial")
    shard(3, "healthy", 0, 300, "initial")
    shard(3, "suspect", 300, 320, "probe_failure", "healthy", **{Attr.FLEET_PROBE_FAILURES: 1})
    shard(3, "dead", 320, None, "reported_failure", "suspect",
          **{Attr.FLEET_REPORTED_FAILURES: 3, Attr.FLEET_PROBE_FAILURES: 1,
             Attr.FLEET_LAST_ERROR: SHARD_ERROR})
    kit.span(SpanName.FLEET_PROBE_TICK, 0, 330, {}, events=[
        (EventName.ROUTER_MEMBERSHIP_PUSH, 1, {Attr.ROUTER_SERVING_COUNT: 4}),
        (EventName.ROUTER_MEMBERSHIP_PUSH, 325, {Attr.ROUTER_SERVING_COUNT: 3})])

    # snapshot 1 commits; snapshot 2 fails behind the stranded completion
    for ck, start, end, outcome, index in ((CK1, 150, 210, "published", 1),
                                           (CK2, 450, 751, "failed", 2)):
        kit.span(SpanName.RL_ADMISSION_FENCE, start, end,
                 {Attr.CHECKPOINT_ID: ck, Attr.FENCE_OWNER: "gym_checkpoint"})
        kit.span(SpanName.RL_SNAPSHOT, start, end, {
            Attr.CHECKPOINT_ID: ck, Attr.SNAPSHOT_INDEX: index, Attr.SNAPSHOT_OUTCOME: outcome})
    ck = {Attr.CHECKPOINT_ID: CK1}
    kit.span(SpanName.CK_COORDINATE_PREPARE, 150, 160, {**ck, Attr.CK_PREPARED: True})
    for kind, end in (("environment", 151), ("model", 155), ("agent", 158), ("resources", 159)):
        kit.span(SpanName.CK_PREPARE, 150, end, {**ck, Attr.CK_PARTICIPANT_KIND: kind,
                                                 Attr.CK_INSTANCE: f"{kind[0]}0",
                                                 Attr.CK_OUTCOME: "ok"})
        kit.span(SpanName.CK_COMMIT, 160, 200 + (kind == "agent") * 5, {
            **ck, Attr.CK_PARTICIPANT_KIND: kind, Attr.CK_INSTANCE: f"{kind[0]}0",
            Attr.CK_OUTCOME: "ok"})
        kit.span(SpanName.CK_RESUME, 209, 210, {**ck, Attr.CK_PARTICIPANT_KIND: kind,
                                                Attr.CK_INSTANCE: f"{kind[0]}0",
                                                Attr.CK_OUTCOME: "ok"})
    kit.span(SpanName.CK_COORDINATE_COMMIT, 160, 206, ck)
    ck2 = {Attr.CHECKPOINT_ID: CK2}
    kit.span(SpanName.CK_COORDINATE_PREPARE, 450, 751,
             {**ck2, Attr.CK_STOPPED_AT: "agent", Attr.CK_PREPARED: False},
             error="agent prepare incomplete")
    kit.span(SpanName.CK_PREPARE, 450, 750, {
        **ck2, Attr.CK_PARTICIPANT_KIND: "agent", Attr.CK_INSTANCE: "a0",
        Attr.CK_OUTCOME: "error", Attr.CK_CODE: "agent_prepare_incomplete",
        Attr.CK_BLOCKERS: 1, Attr.CK_BLOCKER_KEYS: ("r-7",)})

    # rollouts
    for i in range(12):
        rid, start = f"r-{i}", 5.0 * i
        who = {Attr.ROLLOUT_ID: rid, Attr.PROMPT_IDX: i, Attr.RL_ATTEMPT: 0}
        if i == 7:
            continue
        end = start + 100 + 10 * i
        failed = i == 9
        kit.span(SpanName.RL_ATTEMPT, start, end, {
            **who, Attr.GROUP_ID: f"g-{i}-0",
            Attr.ROLLOUT_OUTCOME: "failed" if failed else "committed",
            **({Attr.FAILURE_CLASS: "data", Attr.FAILURE_REASON: DATA_REASON}
               if failed else {})}, error="data failure" if failed else None)
        kit.span(SpanName.RL_DEADLINE, start, end, {
            **who, Attr.DEADLINE_KIND: "rollout", Attr.DEADLINE_BUDGET_S: 180.0,
            Attr.DEADLINE_OUTCOME: "completed"})
        if not failed:
            kit.span(SpanName.AGENT_EXECUTION, start, end - 1, who, events=[
                (EventName.AGENT_COMPLETED, end - 1, {}),
                (EventName.AGENT_ACKNOWLEDGED, end, {})])
        if i in (10, 11):  # running across snapshot 1: parked, released, fine
            kit.span(SpanName.AGENT_PARKED, 150, 210, {**who, Attr.CHECKPOINT_ID: CK1})
    # r-7: the write-up's rollout
    r7 = {Attr.ROLLOUT_ID: "r-7", Attr.PROMPT_IDX: 7}
    t0 = {**r7, Attr.RL_ATTEMPT: 0}
    kit.span(SpanName.RL_ATTEMPT, 0, 180, {
        **t0, Attr.GROUP_ID: "g-7-0", Attr.ROLLOUT_OUTCOME: "failed",
        Attr.FAILURE_CLASS: "infra", Attr.FAILURE_REASON: "RolloutTimeout"}, error="timeout")
    kit.span(SpanName.RL_DEADLINE, 0, 180, {
        **t0, Attr.DEADLINE_KIND: "rollout", Attr.DEADLINE_BUDGET_S: 180.0,
        Attr.DEADLINE_OUTCOME: "fired", Attr.DEADLINE_STATE_WHEN_FIRED: "parked"},
        events=[(EventName.DEADLINE_FIRE, 180, {Attr.DEADLINE_STATE_WHEN_FIRED: "parked"})])
    kit.span(SpanName.AGENT_PARKED, 150, 210, {**t0, Attr.CHECKPOINT_ID: CK1})
    kit.span(SpanName.AGENT_EXECUTION, 0, 240, t0, events=[(EventName.AGENT_COMPLETED, 240, {})])
    t1 = {**r7, Attr.RL_ATTEMPT: 1}
    kit.span(SpanName.RL_ATTEMPT, 182, 300, {**t1, Attr.GROUP_ID: "g-7-1",
                                             Attr.ROLLOUT_OUTCOME: "committed"})
    kit.span(SpanName.RL_DEADLINE, 182, 300, {
        **t1, Attr.DEADLINE_KIND: "rollout", Attr.DEADLINE_BUDGET_S: 180.0,
        Attr.DEADLINE_OUTCOME: "completed"})
    kit.span(SpanName.AGENT_EXECUTION, 182, 299, t1, events=[
        (EventName.AGENT_COMPLETED, 299, {}), (EventName.AGENT_ACKNOWLEDGED, 300, {})])
    # a try still running at the end of the capture (open interval)
    kit.open(SpanName.RL_ATTEMPT, 760, {Attr.ROLLOUT_ID: "r-12", Attr.PROMPT_IDX: 12,
                                        Attr.RL_ATTEMPT: 0, Attr.GROUP_ID: "g-12-0"})

    # training: steps until 300 s, then nothing (the stall)
    for step, (a, b) in enumerate(((90, 100), (190, 200), (290, 300))):
        kit.span(SpanName.RL_TRAIN_STEP, a, b, {Attr.TRAIN_STEP: step})
    kit.span(SpanName.RL_STALL_WATCHDOG_TICK, END_S - 1, END_S, {})


@pytest.fixture(scope="session", params=STORE_KINDS)
def p1_path(request, tmp_path_factory) -> Iterator:
    """The P1 run in a store of each kind (tests/store_kinds.py): the dashboard's builders
    and pages read both through the same views."""
    path = store_target(request.param, tmp_path_factory.mktemp("p1"))
    inst = instrument(path, service_name="tests", run_id=RUN)
    try:
        build_p1_run(SpanKit(inst))
        assert inst.flush()
    finally:
        inst.shutdown()
    yield path


@pytest.fixture
def p1_store(p1_path) -> Iterator[RunStore]:
    with RunStore(p1_path, read_only=True) as store:
        yield store


def serving_lines(plot) -> dict[str, pd.DataFrame]:
    """What ``time_figures.serving_plot`` draws, back as each line's steps (t, serving):
    where each level starts, and the line's last value at its end."""
    seg = tf.layer(plot, "lines")
    t = "t"
    out = {}
    for what in tl.SERVING_LINES:
        mine = seg[seg.what == what]
        levels, moves = mine[mine.y0 == mine.y1], mine[mine.y0 != mine.y1]
        if not len(levels):
            out[what] = pd.DataFrame({"t": [], "serving": []}, dtype="float64")
            continue
        end = float(levels.t_end.iloc[-1])
        last = moves[moves[t] == end]
        final = float(last.y1.iloc[-1]) if len(last) else float(levels.y0.iloc[-1])
        out[what] = pd.DataFrame({"t": [*levels[t], end], "serving": [*levels.y0, final]},
                                 dtype="float64")
    return out


# -- a run with engines: three shards, the engine behind each, one traced engine --------------
ENGINE_RUN = "engines"
ADDRESSES = [f"{host}:8000" for host, _ in ENGINES.values()]  # serving shards 0, 1, 2
QUEUES = (0.25, 1.5, 0.5)  # the requests' seconds queued; each lasts 2 s


@pytest.fixture(scope="session")
def engine_path(tmp_path_factory) -> Iterator:
    """Three shards, the engine behind each scraped ``READS`` times (tests/engine_metrics.py),
    and three requests one engine traced (service ``tests``)."""
    path = tmp_path_factory.mktemp("engines") / "run.duckdb"
    inst = instrument(path, service_name="tests", run_id=ENGINE_RUN)
    try:
        kit = SpanKit(inst)
        write_engine_run(kit, ENGINE_RUN, t0_ns=T0)
        for k, queued in enumerate(QUEUES):
            span = kit.tracer.start_span(
                SpanName.VLLM_REQUEST, kind=SpanKind.SERVER, start_time=T0 + (11 + k) * S,
                attributes={VllmAttr.REQUEST_ID: f"req-{k}", VllmAttr.TIME_IN_QUEUE: queued,
                            VllmAttr.TIME_TO_FIRST_TOKEN: queued + 0.125,
                            VllmAttr.PROMPT_TOKENS: 20, VllmAttr.COMPLETION_TOKENS: 5})
            span.end(end_time=T0 + (13 + k) * S)
        assert inst.flush()
    finally:
        inst.shutdown()
    yield path
