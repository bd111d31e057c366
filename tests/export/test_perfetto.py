"""The Perfetto/Chrome trace export of a real run (the demo scenario replayed into a store):
parsed back and checked for what ui.perfetto.dev needs to draw it.

Parsed here rather than loaded by the ``perfetto`` package's trace processor: that package
(0.59 on PyPI) ships no trace_processor_shell and downloads one on first use, which a machine
without access beyond the package registries cannot do.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from rolloutscope.cli import main
from rolloutscope.export.perfetto import PROCESSES, Window, WindowError, export_run
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RunStore

RUN = "demo"


@pytest.fixture(scope="module")
def demo_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "demo.duckdb"
    with RunStore(path) as store:
        replay_into_store(get("demo"), store, run_id=RUN)
    return path


def exported(path, tmp_path, window=Window()):
    out = tmp_path / "trace.json"
    with RunStore(path, read_only=True) as store:
        summary = export_run(store, RUN, out, window=window)
    doc = json.loads(out.read_text())
    return summary, doc["traceEvents"]


def names(events):
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    return procs, threads


def test_every_shard_participant_and_rollout_lane_is_a_named_track(demo_path, tmp_path):
    summary, events = exported(demo_path, tmp_path)
    procs, threads = names(events)
    assert set(procs.values()) == set(PROCESSES)
    by_proc = defaultdict(set)
    for (pid, _), lane in threads.items():
        by_proc[procs[pid]].add(lane)
    assert {f"shard {i}" for i in range(4)} <= by_proc["generation fleet"]
    assert {"snapshot windows", "controller", "agent"} <= by_proc["checkpoints"]
    assert "p10000 try 0" in by_proc["rollouts"] and "p10000 try 0 parked" in by_proc["rollouts"]
    assert {"train steps", "weight syncs"} <= by_proc["controller"]
    # every event sits on a track the metadata names
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] in ("X", "i")}
    assert used <= set(threads)
    assert summary.tracks == len(threads)


def test_intervals_are_complete_events_that_nest_on_their_track(demo_path, tmp_path):
    _, events = exported(demo_path, tmp_path)
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 and e["ts"] >= -1e-6 for e in spans)
    by_track = defaultdict(list)
    for e in spans:
        by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for track, intervals in by_track.items():  # the JSON importer needs proper nesting
        stack: list[float] = []
        for start, end in sorted(intervals, key=lambda se: (se[0], -se[1])):
            while stack and stack[-1] <= start + 1e-6:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-6, (track, start, end, stack)
            stack.append(end)
    hung = [e for e in spans if e["name"] == "rl.weight_sync" and e["args"].get("open")]
    assert len(hung) == 1  # the refit that never ends, drawn to the end of the capture
    fired = [e for e in events if e["ph"] == "i" and e["name"] == "deadline fired"]
    assert len(fired) == 4


def test_the_gauges_are_counters(demo_path, tmp_path):
    summary, events = exported(demo_path, tmp_path)
    counters = defaultdict(list)
    for e in events:
        if e["ph"] == "C":
            counters[e["name"]].append(e)
    assert set(counters) == {"tries in flight", "tries committed", "serving shards"}
    serving = [e["args"]["serving"] for e in sorted(counters["serving shards"],
                                                     key=lambda e: e["ts"])]
    assert serving[0] == 4 and serving[-1] == 3  # shard 3 quarantined
    committed = [e["args"]["committed"] for e in counters["tries committed"]]
    assert max(committed) == 220
    assert summary.counters == sum(len(v) for v in counters.values())


def test_a_window_keeps_only_what_overlaps_it(demo_path, tmp_path):
    _, events = exported(demo_path, tmp_path, Window.parse("480:560"))
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["ts"] <= 560e6 and e["ts"] + e["dur"] >= 480e6 for e in spans)
    assert all(480e6 <= e["ts"] <= 560e6 for e in events if e["ph"] in ("i", "C"))
    procs, threads = names(events)
    assert "shard 3" in threads.values()


@pytest.mark.parametrize("text", ["400", "a:b", "900:400"])
def test_a_bad_window_is_refused_by_name(text):
    with pytest.raises(WindowError, match="window"):
        Window.parse(text)


def test_the_command_writes_the_file_and_says_how_to_open_it(demo_path, tmp_path, capsys):
    out = tmp_path / "cli.json"
    assert main(["export", "perfetto", f"{demo_path}:{RUN}", "--out", str(out),
                 "--window", "400:900"]) == 0
    said = capsys.readouterr().out
    assert "ui.perfetto.dev" in said and "tracks" in said
    assert json.loads(out.read_text())["otherData"]["run_id"] == RUN
    assert main(["export", "perfetto", str(demo_path), "--out", str(out), "--window",
                 "9:1"]) == 2
    assert "END must be after START" in capsys.readouterr().err
