"""rl-metrics: logger scalars from JSON lines and TensorBoard event files, with their step."""

from __future__ import annotations

import json

import pytest

from rolloutscope.cli import main
from rolloutscope.collectors.importers.log_lines import parse_iso8601
from rolloutscope.store import RunStore

from .conftest import METRICS_JSONL, run_import

T0 = parse_iso8601("2026-08-20T10:00:00Z")
S = 10**9


def test_wide_and_long_json_lines_are_stored_as_scalars_and_bad_lines_located(capsys, db):
    report = run_import(capsys, "rl-metrics", METRICS_JSONL, db=db, run_id="m1")
    assert report["lines_read"] == 89 and report["recognised"] == {"jsonl_record": 84}
    assert report["bad_count"] == 5
    assert [b.split(": ", 1)[0] for b in report["bad"]] == [
        f"{METRICS_JSONL}:{n}" for n in (6, 8, 10, 12, 14)]
    with RunStore(db, read_only=True) as store:
        kinds = store.query("SELECT DISTINCT kind FROM metrics")
        committed = store.query(
            "SELECT step, ts_ns, value FROM metrics WHERE name = 'rollout/committed_total' "
            "ORDER BY ts_ns LIMIT 2")
        long_shape = store.query(
            "SELECT step, value FROM metrics WHERE name = 'timing/rollout/total_s'")
        names = {r[0] for r in store.query("SELECT DISTINCT name FROM metrics")}
    assert kinds == [("scalar",)]
    assert committed == [(0, T0 + 30 * S, 3.0), (1, T0 + 60 * S, 6.0)]
    assert long_shape == [(0, 12.5)]
    assert {"train/loss", "gen_fleet/shards/dead", "router/serving_backends"} <= names
    assert "note" not in names  # strings inside a good record are skipped


def test_json_lines_without_times_need_a_start_and_are_spaced_by_the_interval(
        capsys, db, tmp_path):
    untimed = tmp_path / "untimed.jsonl"
    untimed.write_text('{"step": 1, "rollout/inflight": 4}\n{"_step": 1, "rollout/inflight": 0}\n')
    assert main(["import", "rl-metrics", str(untimed), "--db", str(db)]) == 2
    assert "--start" in capsys.readouterr().err
    run_import(capsys, "rl-metrics", untimed, db=db, start="2026-08-20T10:00:00Z",
               interval_s=15)
    with RunStore(db, read_only=True) as store:
        rows = store.query("SELECT ts_ns, step, value FROM metrics ORDER BY ts_ns")
        meta = json.loads(store.query("SELECT metadata FROM runs")[0][0])
    assert rows == [(T0, 1, 4.0), (T0 + 15 * S, 1, 0.0)]
    assert meta["imports"][0]["timestamps"] == {str(untimed): "line_order"}


def _write_event_file(folder, events):
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    writer = EventFileWriter(str(folder))
    for wall, step, tag, value in events:
        if isinstance(value, int):  # a TF2-style scalar: a one-element tensor
            summary_value = Summary.Value(tag=tag, tensor=tensor_util.make_tensor_proto(
                float(value)))
        else:
            summary_value = Summary.Value(tag=tag, simple_value=value)
        writer.add_event(Event(wall_time=wall, step=step,
                               summary=Summary(value=[summary_value])))
    writer.close()


def test_tensorboard_scalars_keep_their_step_and_one_logger_call_shares_one_time(
        capsys, db, tmp_path):
    t0 = T0 / 1e9
    _write_event_file(tmp_path / "tb", [
        (t0 + 30.0000, 0, "router/serving_backends", 2.0),
        (t0 + 30.0003, 0, "gen_fleet/serving_shards", 2),
        (t0 + 60.0000, 0, "router/serving_backends", 2.0),
        (t0 + 60.0002, 0, "gen_fleet/serving_shards", 1),
        (t0 + 90.0000, 1, "train/loss", 0.25),
    ])
    report = run_import(capsys, "rl-metrics", tmp_path / "tb", db=db, run_id="tb")
    assert report["metrics"] == 5 and report["bad_count"] == 0
    with RunStore(db, read_only=True) as store:
        rows = store.query("SELECT name, ts_ns, step, value FROM metrics ORDER BY ts_ns, name")
        divergence = store.query("SELECT start_ns FROM router_fleet_divergence")
    assert rows == [
        ("gen_fleet/serving_shards", T0 + 30 * S, 0, 2.0),
        ("router/serving_backends", T0 + 30 * S, 0, 2.0),
        ("gen_fleet/serving_shards", T0 + 60 * S, 0, 1.0),
        ("router/serving_backends", T0 + 60 * S, 0, 2.0),
        ("train/loss", T0 + 90 * S, 1, 0.25),
    ]
    assert divergence == [(T0 + 60 * S,)]


def test_a_damaged_event_file_is_reported_and_the_rest_still_imports(capsys, db, tmp_path):
    _write_event_file(tmp_path / "tb", [(T0 / 1e9 + 1, 1, "train/loss", 0.5)])
    good = next((tmp_path / "tb").glob("*tfevents*"))
    damaged = tmp_path / "tb" / "events.out.tfevents.2.damaged"
    damaged.write_bytes(good.read_bytes()[:-7])
    report = run_import(capsys, "rl-metrics", tmp_path / "tb", db=db, run_id="tb")
    assert report["metrics"] >= 1
    assert report["bad_count"] == 1 and str(damaged) in report["bad"][0]


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_an_empty_metrics_file_imports_nothing_without_failing(capsys, db, tmp_path, content):
    empty = tmp_path / "empty.jsonl"
    empty.write_text(content)
    report = run_import(capsys, "rl-metrics", empty, db=db, run_id="e")
    assert report["metrics"] == 0 and report["bad_count"] == 0
