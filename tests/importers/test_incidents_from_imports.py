"""Imported runs get the incident views of live ones: the stall (P3) and the quarantine (P4) of
the fixtures are found from the controller log, from the logger's metrics alone, and from both,
and the log finds what the same timeline recorded as spans through the SDK finds."""

from __future__ import annotations

from rolloutscope.collectors.exporter import emit_open_marker, instrument
from rolloutscope.collectors.importers.log_lines import parse_iso8601
from rolloutscope.vocabulary import Attr, EventName, SpanName

from .conftest import CONTROLLER_LOG, METRICS_JSONL, incidents, run_import

T0 = parse_iso8601("2026-08-20T10:00:00Z")
S = 10**9


def _by_kind(rows):
    return {r["kind"]: r for r in rows}


def test_the_controller_log_alone_shows_the_stall_and_the_quarantine(capsys, db):
    run_import(capsys, "rl-log", CONTROLLER_LOG, db=db, run_id="r1")
    found = _by_kind(incidents(capsys, db))
    assert set(found) == {"stall", "quarantine", "env_unhealthy"}
    stall = found["stall"]
    assert stall["start_ns"] == T0 + 120 * S  # the last train step line
    assert ("(0 rollouts in flight, 12 groups committed, step 3/150, stall_timeout_s=600)"
            in stall["summary"])
    assert len(stall["evidence"]) == 2  # the two stall lines
    quarantine = found["quarantine"]
    assert quarantine["subject"] == "shard 1"
    assert quarantine["summary"].startswith("Shard 1 quarantined at 100.0 s (suspect -> dead")
    assert "10.0 s after it turned suspect" in quarantine["summary"]


def test_the_metrics_alone_show_the_stall_and_the_quarantine(capsys, db):
    run_import(capsys, "rl-metrics", METRICS_JSONL, db=db, run_id="m1")
    found = _by_kind(incidents(capsys, db))
    assert {"stall", "quarantine"} <= set(found)
    stall = found["stall"]
    assert stall["start_ns"] == T0 + 120 * S and stall["end_ns"] is None
    assert "for 2280 s until the end of the run (0 rollouts in flight, 12 groups committed, " \
           "step 3, stall_timeout_s=600)" in stall["summary"]
    quarantine = found["quarantine"]
    assert quarantine["subject"] == "generation fleet"
    assert (quarantine["start_ns"], quarantine["end_ns"]) == (T0 + 90 * S, T0 + 120 * S)
    assert "gen_fleet/shards/dead 0 -> 1, serving shards 2 -> 1" in quarantine["summary"]
    assert "serving backends 2 -> 1 at 120.0 s" in quarantine["summary"]


def test_a_stalled_run_that_reached_its_last_step_is_not_a_stall(capsys, db, tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"max_num_steps": 3}')
    run_import(capsys, "rl-metrics", METRICS_JSONL, db=db, run_id="m1", config=config)
    assert "stall" not in _by_kind(incidents(capsys, db))


def test_log_and_metrics_of_one_run_combine_the_commits_and_the_router_drop(capsys, db):
    run_import(capsys, "rl-log", CONTROLLER_LOG, db=db, run_id="r1")
    run_import(capsys, "rl-metrics", METRICS_JSONL, db=db, run_id="r1")
    found = _by_kind(incidents(capsys, db))
    assert set(found) == {"stall", "quarantine", "env_unhealthy", "router_fleet_divergence"}
    assert "12 groups committed, step 3/150" in found["stall"]["summary"]
    assert found["quarantine"]["subject"] == "shard 1"  # the log's stays, not the fleet counts
    assert "serving backends 2 -> 1 at 150.0 s" in found["quarantine"]["summary"]


def _sdk_timeline(path):
    """The controller log's timeline, recorded live through the SDK and the exporter."""
    inst = instrument(path, service_name="nemo-rl/controller", run_id="sdk")
    tracer = inst.tracer("tests")

    def span(name, start_s, end_s, attrs=None, events=()):
        s = tracer.start_span(name, attributes=attrs or {}, start_time=T0 + int(start_s * S))
        for ev_name, ev_attrs in events:
            s.add_event(ev_name, ev_attrs, timestamp=T0 + int(end_s * S))
        if end_s is not None:
            s.end(end_time=T0 + int(end_s * S))
        return s

    try:
        inst.store.register_run("sdk", config={"max_num_steps": 150, "stall_timeout_s": 600})
        for step, (start, end) in enumerate(((0, 40), (42.104, 80), (82.25, 120)), start=1):
            span(SpanName.RL_TRAIN_STEP, start, end, {Attr.TRAIN_STEP: step})
        span(SpanName.RL_WEIGHT_SYNC, 40, 42.104, {Attr.TRAINER_VERSION: 1})
        span(SpanName.RL_WEIGHT_SYNC, 80, 82.25, {Attr.TRAINER_VERSION: 2})
        emit_open_marker(tracer, span(SpanName.RL_WEIGHT_SYNC, 120, None,
                                      {Attr.TRAINER_VERSION: 3}))
        shard = {Attr.SHARD_IDX: 1}
        span(SpanName.SHARD_STATE, 0, 90, {**shard, Attr.FLEET_STATE: "healthy"})
        span(SpanName.SHARD_STATE, 90, 100, {**shard, Attr.FLEET_STATE: "suspect",
                                             Attr.FLEET_PREVIOUS_STATE: "healthy"})
        emit_open_marker(tracer, span(SpanName.SHARD_STATE, 100, None, {
            **shard, Attr.FLEET_STATE: "dead", Attr.FLEET_PREVIOUS_STATE: "suspect"}))
        span(SpanName.RL_STALL_WATCHDOG_TICK, 300, 300, events=[(
            EventName.ENV_HEALTH_PROBLEM, {Attr.ENV_NAME: "math",
                                           Attr.ENV_PROBLEM: "did not answer"})])
        for at, idle in ((2138, 2018.0), (2168, 2048.0)):
            span(SpanName.RL_STALL_WATCHDOG_TICK, at, at, events=[(EventName.STALL, {
                Attr.STALL_IDLE_S: idle, Attr.STALL_INFLIGHT: 0, Attr.STALL_COMMITTED: 12})])
        span(SpanName.RL_STALL_WATCHDOG_TICK, 2170, 2170, events=[(
            EventName.FLEET_EXHAUSTED, {Attr.FLEET_SERVING_SHARDS: 1})])
        assert inst.flush()
    finally:
        inst.shutdown()


def test_incidents_from_the_imported_log_match_those_from_the_same_timeline_as_spans(
        capsys, tmp_path):
    imported, live = tmp_path / "imported.duckdb", tmp_path / "live.duckdb"
    run_import(capsys, "rl-log", CONTROLLER_LOG, db=imported, run_id="r1")
    _sdk_timeline(live)
    from_log = incidents(capsys, imported)
    from_spans = incidents(capsys, live)
    assert sorted((r["kind"], r["subject"]) for r in from_log) == sorted(
        (r["kind"], r["subject"]) for r in from_spans) == [
        ("env_unhealthy", "environment math"), ("quarantine", "shard 1"),
        ("stall", "controller")]
    assert [r["start_ns"] for r in sorted(from_log, key=lambda r: r["kind"])] == [
        r["start_ns"] for r in sorted(from_spans, key=lambda r: r["kind"])]
