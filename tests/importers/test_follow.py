"""`rolloutscope follow rl-log`: a log being written, partial lines and rotation, into a running
collector over real OTLP/HTTP on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from rolloutscope.collectors.importers.follow import Follower, LogTail
from tests.collectors.conftest import start_collector

P = "(SingleControllerActor pid=4242) "


def line(ts: str, text: str) -> str:
    return f"2026-08-20 {ts} {P}{text}\n"


@pytest.fixture
def collector(tmp_path):
    c = start_collector(tmp_path / "live.duckdb")
    yield c
    c.stop()


def _states(collector) -> list[tuple]:
    return [tuple(r.values()) for r in collector.client.query_records(
        "SELECT state, end_ns IS NULL AS open FROM shard_states WHERE shard_idx = 1 "
        "ORDER BY start_ns")]


class TestLogTail:
    def test_a_partial_line_waits_for_its_newline(self, tmp_path):
        path = tmp_path / "c.log"
        path.write_text("first\nsec")
        tail = LogTail(path)
        assert tail.read_lines() == ["first"]
        with open(path, "a") as fh:
            fh.write("ond\n")
        assert tail.read_lines() == ["second"]

    def test_rotation_reads_the_old_file_to_its_end_then_the_new_one(self, tmp_path):
        path = tmp_path / "c.log"
        path.write_text("a\n")
        tail = LogTail(path)
        assert tail.read_lines() == ["a"]
        with open(path, "a") as fh:
            fh.write("b\nlast-without-newline")
        os.rename(path, tmp_path / "c.log.1")
        path.write_text("new\n")
        assert tail.read_lines() == ["b", "last-without-newline", "new"]
        assert tail.generation == 1

    def test_truncation_in_place_restarts_at_the_beginning(self, tmp_path):
        path = tmp_path / "c.log"
        path.write_text("a long first line\n")
        tail = LogTail(path)
        tail.read_lines()
        with open(path, "r+") as fh:
            fh.truncate(0)
        with open(path, "a") as fh:
            fh.write("x\n")
        assert tail.read_lines() == ["x"]

    def test_from_end_skips_what_the_file_already_holds(self, tmp_path):
        path = tmp_path / "c.log"
        path.write_text("old\n")
        tail = LogTail(path, from_end=True)
        assert tail.read_lines() == []
        with open(path, "a") as fh:
            fh.write("new\n")
        assert tail.read_lines() == ["new"]


def test_a_followed_log_shows_the_current_shard_state_live_and_survives_rotation(
        tmp_path, collector):
    path = tmp_path / "controller.log"
    path.write_text(line("10:00:00,000", "rollout_pump: starting")
                    + line("10:01:30,000", "gen_fleet: shard 1 healthy -> suspect (ActorDiedError: "
                                           "The actor died unexpectedly)")
                    + line("10:01:40,000", "gen_fleet: shard 1 suspect")[:-1])  # partial
    follower = Follower(path, collector=collector.http, run_id="live-run")
    assert follower.step() == 2
    assert _states(collector) == [("healthy", False), ("suspect", True)]

    with open(path, "a") as fh:  # the rest of the partial line, then rotate
        fh.write(" -> dead (ActorDiedError: The actor died unexpectedly)\n")
    os.rename(path, tmp_path / "controller.log.1")
    path.write_text(line("10:02:00,000", "train step 3/150  trainer_v=3  lag=1"))
    assert follower.step() == 2
    assert _states(collector) == [("healthy", False), ("suspect", False), ("dead", True)]
    assert collector.count("open_spans") == 1  # only the current stay is open
    assert collector.count("logs") == 4
    assert collector.client.query_records(
        "SELECT count(*) AS n FROM spans WHERE name = 'rl.train_step'")[0]["n"] == 1
    incidents = collector.client.query_records("SELECT kind, subject FROM incidents")
    assert {"kind": "quarantine", "subject": "shard 1"} in incidents


def test_an_unreachable_collector_is_retried_until_stopped_without_crashing(tmp_path):
    path = tmp_path / "c.log"
    path.write_text(line("10:00:00,000", "rollout_pump: starting"))
    stop = threading.Event()
    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the second wait asks the follower to stop
        waits.append(seconds)
        if len(waits) == 2:
            stop.set()

    follower = Follower(path, collector="http://127.0.0.1:9", run_id="r", sleep=sleep)
    follower.step(stop)
    assert waits == [0.5, 1.0]  # capped exponential backoff
    assert follower.stats.batches_refused >= 1 and follower.stats.retries >= 2


def test_the_follow_command_streams_until_sigterm(tmp_path, collector):
    path = tmp_path / "controller.log"
    path.write_text(line("10:00:40,000", "train step 1/150  trainer_v=1  lag=0"))
    proc = subprocess.Popen([sys.executable, "-m", "rolloutscope", "follow", "rl-log",
                             str(path), "--collector", collector.http, "--poll-s", "0.05"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().startswith("rolloutscope following")
        with open(path, "a") as fh:
            fh.write(line("10:01:20,000", "train step 2/150  trainer_v=2  lag=1"))
        _wait_for(lambda: collector.count("logs") == 2)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "followed 2 line(s)" in out


def _wait_for(predicate, timeout_s: float = 30.0) -> None:
    done = threading.Event()
    deadline = threading.Timer(timeout_s, done.set)
    deadline.start()
    try:
        while not done.is_set():
            if predicate():
                return
            done.wait(0.05)
        raise AssertionError("condition not met in time")
    finally:
        deadline.cancel()
