"""The wait board's view ``in_flight`` (``in_flight_window``): the rollouts in flight, each with
its phase, deadline, engine and last progress, from the open markers and a recent window; and
that its read on a run ten times larger reads the same window, not the run.

Spans come from the real OTel SDK and the in-process exporter (``SpanKit``), in the names the
controller and Gym spans carry; open intervals announce themselves with start markers as a live
process sends them (``emit_open_marker``)."""

from __future__ import annotations

import json

import pytest

from rolloutscope.collectors.exporter import emit_open_marker, instrument
from rolloutscope.store import RunStore
from rolloutscope.vocabulary import Attr, FenceOwner, SpanName
from tests.synthetic_run import synthetic_run

from .conftest import S, T0, SpanKit


def rl_rollout(kit, idx: int, start_s: float, *, attempt_open: bool = True):
    """An RL prompt group in flight: its prompt span and, if ``attempt_open``, its try 0 and
    the try's rollout deadline (180 s), all open."""
    ids = {Attr.PROMPT_IDX: idx, Attr.ROLLOUT_ID: f"p{idx}"}
    kit.open(SpanName.RL_PROMPT, start_s, ids)
    if attempt_open:
        kit.open(SpanName.RL_ATTEMPT, start_s + 1, {**ids, Attr.RL_ATTEMPT: 0})
        kit.open(SpanName.RL_DEADLINE, start_s + 1, {
            **ids, Attr.RL_ATTEMPT: 0, Attr.DEADLINE_KIND: "rollout",
            Attr.DEADLINE_BUDGET_S: 180.0})


def board(store: RunStore, floor_s: float | None, rows_back: int | None = None) -> dict:
    rows = store.query_frame(
        "SELECT * FROM in_flight_window('run-1', ?, ?) ORDER BY start_ns",
        [None if floor_s is None else T0 + int(floor_s * S), rows_back])
    return {r.rollout_id: r for r in rows.itertuples()}


@pytest.fixture
def run(kit):
    """The run ``send_run`` sends, in each kind of store."""
    return send_run(kit)


@pytest.fixture
def file_run(tmp_path):
    """The same run in a DuckDB file, whose row ids are its commit order."""
    inst = instrument(tmp_path / "run.duckdb", service_name="tests", run_id="run-1")
    try:
        yield send_run(SpanKit(inst))
    finally:
        inst.shutdown()


def send_run(kit) -> RunStore:
    """Five RL prompt groups (four in flight) and a released Gym rollout, by their spans."""
    # p1: generating, its row's model call routed to shard 3 at 6 s
    rl_rollout(kit, 1, 0)
    kit.open(SpanName.AGENT_EXECUTION, 2, {Attr.ROLLOUT_ID: "p1-0", Attr.PROMPT_IDX: 1,
                                           Attr.RL_ATTEMPT: 0})
    kit.span(SpanName.ROUTER_REQUEST, 5, 6, {Attr.SHARD_IDX: 3,
                                              Attr.BACKEND_URL: "http://gen-3:8003/v1",
                                              Attr.MODEL_CALL_ID: "p1-0.g0.t0"})
    # p2: parked by a snapshot at 12 s
    rl_rollout(kit, 2, 3)
    kit.open(SpanName.AGENT_EXECUTION, 4, {Attr.ROLLOUT_ID: "p2-0", Attr.PROMPT_IDX: 2,
                                           Attr.RL_ATTEMPT: 0})
    kit.open(SpanName.AGENT_PARKED, 12, {Attr.ROLLOUT_ID: "p2-0", Attr.PROMPT_IDX: 2,
                                         Attr.RL_ATTEMPT: 0, Attr.CHECKPOINT_ID: "ck-7"})
    # p3: its try 0 failed at 20 s, no try since: waiting for a redispatch
    rl_rollout(kit, 3, 8, attempt_open=False)
    kit.span(SpanName.RL_ATTEMPT, 9, 20, {Attr.PROMPT_IDX: 3, Attr.ROLLOUT_ID: "p3",
                                          Attr.RL_ATTEMPT: 0}, error="GymTransportError")
    # p4: no try yet, behind the weight sync's admission fence
    rl_rollout(kit, 4, 25, attempt_open=False)
    kit.open(SpanName.RL_ADMISSION_FENCE, 26, {Attr.FENCE_OWNER: FenceOwner.WEIGHT_SYNC.value})
    # p5 finished: not in flight
    done = kit.span(SpanName.RL_PROMPT, 1, None, {Attr.PROMPT_IDX: 5, Attr.ROLLOUT_ID: "p5"})
    emit_open_marker(kit.tracer, done)
    done.end(end_time=T0 + 30 * S)
    # a released Gym rollout (no RL prompt) verifying since 40 s, on the agent server "agent"
    kit.open(SpanName.GYM_ROLLOUT, 35, {Attr.ROLLOUT_ID: "task-3-a1",
                                        Attr.GYM_SERVER_NAME: "agent"})
    kit.open(SpanName.GYM_VERIFY, 40, {Attr.ROLLOUT_ID: "task-3-a1"})
    return kit.flush()


def test_each_rollout_in_flight_has_its_phase_deadline_engine_and_last_progress(run):
    rows = board(run, floor_s=0)
    assert list(rows) == ["p1", "p2", "p3", "p4", "task-3-a1"]  # p5 finished
    p1, p2, p3, p4, gym = rows.values()
    assert p1.phase == "generating" and p1.attempt == 0
    assert (p1.budget_s, p1.deadline_start_ns) == (180.0, T0 + 1 * S)
    assert (p1.shard_idx, p1.backend_url) == (3, "http://gen-3:8003/v1")
    assert (p1.last_name, p1.last_ns) == ("rl.router.request ended", T0 + 6 * S)
    assert p2.phase == "parked by snapshot ck-7"
    assert (p2.last_name, p2.last_ns) == ("gym.agent.parked started", T0 + 12 * S)
    assert p3.phase == "waiting for redispatch behind weight_sync fence" and p3.attempt == 0
    assert (p3.last_name, p3.last_ns) == ("rl.rollout.attempt ended", T0 + 20 * S)
    assert p3.budget_s != p3.budget_s or p3.budget_s is None  # no deadline runs: NaN or None
    assert p4.phase == "queued behind weight_sync fence"
    assert (p4.last_name, p4.last_ns) == ("rl.rollout.prompt started", T0 + 25 * S)
    assert (gym.dialect, gym.phase, gym.server_name) == ("gym", "verifying", "agent")
    assert (gym.last_name, gym.last_ns) == ("gym.verify started", T0 + 40 * S)


def test_what_ended_before_the_window_is_not_read(run):
    # p3's failed try ended at 20 s: from 21 s on the board no longer sees it, and p1's
    # routed call (6 s) is gone too; what is open is still read whole
    rows = board(run, floor_s=21)
    assert rows["p3"].phase == "queued behind weight_sync fence"
    assert rows["p1"].phase == "generating"
    assert rows["p1"].last_name == "gym.agent.execution started"
    assert list(rows) == ["p1", "p2", "p3", "p4", "task-3-a1"]


def test_the_row_bound_keeps_only_the_last_committed_rows(file_run):
    # rows_back 1 reads the last span committed alone (p5's prompt, not p3's failed try);
    # 0 or None reads every one (what a lake is read with: its row ids are no commit order)
    assert board(file_run, None, rows_back=1)["p3"].phase == "queued behind weight_sync fence"
    for unbounded in (0, None):
        assert board(file_run, None, rows_back=unbounded)["p3"].phase.startswith(
            "waiting for redispatch")


# -- the read is the window's, not the run's ----------------------------------------------------
IN_FLIGHT = 30


def with_rollouts_in_flight(path) -> int:
    """The synthetic run in ``path`` with IN_FLIGHT prompt groups in flight at its end, sent as
    a live controller sends them (start markers through the SDK). Returns 'now'."""
    with RunStore(path, read_only=True) as store:
        now = store.query("SELECT last_seen_ns FROM runs WHERE run_id = 'synthetic'")[0][0]
    inst = instrument(path, service_name="controller", run_id="synthetic")
    try:
        tracer = inst.tracer("tests")
        for i in range(IN_FLIGHT):
            ids = {Attr.PROMPT_IDX: 90_000_000 + i, Attr.ROLLOUT_ID: f"q{i}"}
            for name, attrs in ((SpanName.RL_PROMPT, ids),
                                (SpanName.RL_ATTEMPT, {**ids, Attr.RL_ATTEMPT: 0})):
                span = tracer.start_span(name, attributes=attrs, start_time=now - i * 7 * S)
                emit_open_marker(tracer, span)
        assert inst.flush()
    finally:
        inst.shutdown()
    return now


def window_read(path, now: int) -> tuple[list, dict]:
    """The board's rows and, from DuckDB's profile of the same read, the rows each scan of the
    spans and events tables passed on."""
    sql = ("SELECT rollout_id, attempt, phase, start_ns, last_name, last_ns "
           "FROM in_flight_window('synthetic', ?, 200000) ORDER BY start_ns")
    floor = now - 300 * S
    with RunStore(path, read_only=True) as store, store.cursor() as con:
        rows = con.execute(sql, [floor]).fetchall()
        con.execute("PRAGMA enable_profiling = 'json'")
        con.execute(f"PRAGMA profiling_output = '{path}.profile.json'")
        con.execute(sql, [floor]).fetchall()
        con.execute("PRAGMA disable_profiling")
    profile = json.loads(open(f"{path}.profile.json").read())
    scans: dict[str, int] = {}

    def walk(node):
        info = node.get("extra_info") or {}
        if node.get("operator_type") == "TABLE_SCAN":
            table = str(info.get("Table", "")).rsplit(".", 1)[-1]
            scans[table] = scans.get(table, 0) + int(node.get("operator_cardinality", 0))
        for child in node.get("children", []):
            walk(child)

    walk(profile)
    return rows, scans


def test_a_run_ten_times_larger_reads_the_same_window(tmp_path):
    small, large = tmp_path / "small.duckdb", tmp_path / "large.duckdb"
    synthetic_run(small, spans=20_000)
    synthetic_run(large, spans=200_000)
    now_small, now_large = with_rollouts_in_flight(small), with_rollouts_in_flight(large)
    rows_small, scans_small = window_read(small, now_small)
    rows_large, scans_large = window_read(large, now_large)
    assert len(rows_small) == len(rows_large) == IN_FLIGHT
    # the same rollouts, phases and progress, relative to each run's now
    def relative(rows, now):
        return [(r[0], r[1], r[2], now - r[3], r[4], now - r[5]) for r in rows]

    assert relative(rows_small, now_small) == relative(rows_large, now_large)
    with RunStore(large, read_only=True) as store:
        spans, events = store.query("SELECT (SELECT count(*) FROM spans), "
                                    "(SELECT count(*) FROM span_events)")[0]
        in_window = store.query("SELECT count(*) FROM spans WHERE end_ns >= ?",
                                [now_large - 300 * S])[0][0]
    # every scan of the large run's spans passes on the window's rows, not the run's
    assert scans_large["spans"] <= in_window < spans // 20, (scans_large, in_window, spans)
    assert scans_large["span_events"] < events // 20, (scans_large, events)
