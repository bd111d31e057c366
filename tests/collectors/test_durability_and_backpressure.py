"""Acknowledged means committed: kill -9 during sustained ingest loses nothing acknowledged,
SIGTERM drains everything accepted, and overload is answered with backpressure that the stock
exporters retry through to zero loss."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from rolloutscope.collectors.otlp.counters import METRIC_ACCEPTED
from rolloutscope.store import RunStore
from tests.collectors.conftest import (
    acked,
    run_sender,
    start_collector,
    start_sender,
    wait_for_acks,
)

BATCH = 200
DEADLINE_S = 90.0



def _batches_in_store(db: Path) -> dict[tuple[str, int], int]:
    with RunStore(db) as store:  # read-write: replays the WAL the killed process left
        return {(run_id, batch): n for run_id, batch, n in store.query(
            "SELECT run_id, prompt_idx, count(*) FROM spans GROUP BY ALL")}


def _senders(c, tmp_path: Path, names: list[str], batches: int, size: int):
    procs, files = [], []
    for name in names:
        protocol = "grpc" if name.startswith("grpc") else "http-protobuf"
        endpoint = f"http://{c.grpc}" if protocol == "grpc" else c.http
        ack = tmp_path / f"{name}.acks"
        files.append(ack)
        procs.append(start_sender("batches", protocol, endpoint, name, str(batches), str(size),
                                  str(ack)))
    return procs, files


def _in_rounds(c, tmp_path: Path, names: list[str], rounds: int, size: int) -> list[str]:
    """Senders that export batch b of ``size`` spans only once the test releases round b, to
    all of them at the same moment; each round waits until every sender acknowledged its
    batch. Returns each sender's stdout (its JSON counts)."""
    go = tmp_path / "go"
    procs, files = [], []
    for name in names:
        protocol = "grpc" if name.startswith("grpc") else "http-protobuf"
        endpoint = f"http://{c.grpc}" if protocol == "grpc" else c.http
        files.append(tmp_path / f"{name}.acks")
        procs.append(start_sender("rounds", protocol, endpoint, name, str(rounds), str(size),
                                  str(files[-1]), str(go)))
    for b in range(rounds):
        (tmp_path / f"go.{b}").touch()
        deadline = time.monotonic() + DEADLINE_S
        while min(len(acked(f)) for f in files) <= b and all(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, f"round {b} made no progress"
            time.sleep(0.05)  # polling files written by other processes; no event to await
    results = []
    for p in procs:
        out, err = p.communicate(timeout=DEADLINE_S)
        assert p.returncode == 0, err[-2000:]
        results.append(out)
    return results


def test_kill_9_during_sustained_ingest_loses_no_acknowledged_span(tmp_path):
    c = start_collector(tmp_path / "run.duckdb")
    procs, files = _senders(c, tmp_path, ["http-a", "http-b", "grpc-a"], 100_000, BATCH)
    try:
        wait_for_acks(files, at_least=5, deadline_s=DEADLINE_S)
        c.process.send_signal(signal.SIGKILL)
        c.process.wait(30)
    finally:
        for p in procs:
            p.kill()
            p.wait(30)
    stored = _batches_in_store(c.db)
    for name, ack in zip(["http-a", "http-b", "grpc-a"], files, strict=True):
        acked_batches = acked(ack)
        assert len(acked_batches) >= 5
        missing = [b for b in acked_batches if stored.get((name, b)) != BATCH]
        assert not missing, f"{name}: acknowledged batches missing or partial: {missing[:10]}"


def test_sigterm_drains_and_commits_everything_accepted(tmp_path):
    c = start_collector(tmp_path / "run.duckdb")
    procs, files = _senders(c, tmp_path, ["http-a", "grpc-a"], 100_000, BATCH)
    try:
        wait_for_acks(files, at_least=3, deadline_s=DEADLINE_S)
        assert c.stop(signal.SIGTERM) == 0
    finally:
        for p in procs:
            p.kill()
            p.wait(30)
    assert "everything received is committed" in "".join(c.output)
    stored = _batches_in_store(c.db)
    with RunStore(c.db, read_only=True) as store:
        spans = store.query("SELECT count(*) FROM spans")[0][0]
        accepted = store.query(
            "SELECT max(value) FROM metrics WHERE name = ? "
            "AND json_extract_string(attributes, '$.signal') = 'traces'", [METRIC_ACCEPTED])[0][0]
    assert accepted == spans  # every span the collector accepted is in the file
    assert set(stored.values()) == {BATCH}  # no batch half-written
    for name, ack in zip(["http-a", "grpc-a"], files, strict=True):
        assert all(stored.get((name, b)) == BATCH for b in acked(ack))


@pytest.mark.slow
def test_overload_is_answered_with_backpressure_and_retrying_exporters_lose_nothing(tmp_path):
    size, batches = 3_000, 6
    # a queue that holds one batch, a writer that gathers for 0.6 s before it commits, and
    # three senders that export each round's batch at the same moment: in every round two of
    # them find the queue full and retry (Retry-After 1 s). The hold is shorter than the wait,
    # so a retry meets a full queue only when the other one retried first: every sender is in
    # by its third try, well within the stock exporters' six.
    c = start_collector(tmp_path / "run.duckdb", "--max-queued-rows", str(size),
                        "--retry-after-s", "1", "--commit-max-delay-ms", "600",
                        "--no-commit-when-idle")
    names = ["http-a", "http-b", "grpc-a"]
    results = _in_rounds(c, tmp_path, names, batches, size)
    metrics = c.client.metrics()
    stored = c.client.query_records("SELECT run_id, count(*) AS n FROM spans GROUP BY run_id")
    c.stop()
    assert all('"failed": 0' in r and f'"acked": {batches}' in r for r in results), results
    assert {r["run_id"]: r["n"] for r in stored} == {n: size * batches for n in names}
    assert metrics["rolloutscope.collector.items.rejected_backpressure"]["traces"] > 0
    assert metrics["rolloutscope.collector.items.retried"]["traces"] > 0
    assert metrics["rolloutscope.collector.items.accepted"]["traces"] == 3 * size * batches
    assert any(k in metrics["rolloutscope.collector.requests"]
               for k in ("http/429", "grpc/RESOURCE_EXHAUSTED"))


def test_the_stock_grpc_exporter_gets_resource_exhausted_with_retry_info(tmp_path):
    size, rounds = 2_000, 3
    # the queue admits one batch at a time (a batch over --max-queued-rows only into an empty
    # queue) and holds it for the full 1.5 s, since the writer does not commit early when
    # nothing else is arriving: of two senders released together, one finds it full and
    # retries after the RetryInfo's 1 s, so it is in by its third try. (Two, not three: a
    # third sender waits out two holds, five tries, and the stock exporter makes at most six.)
    c = start_collector(tmp_path / "run.duckdb", "--max-queued-rows", "10",
                        "--retry-after-s", "1", "--commit-max-delay-ms", "1500",
                        "--no-commit-when-idle")
    try:
        names = ["grpc-a", "grpc-b"]
        results = _in_rounds(c, tmp_path, names, rounds, size)
        assert all('"failed": 0' in r for r in results), results
        metrics = c.client.metrics()
        assert metrics["rolloutscope.collector.requests"].get("grpc/RESOURCE_EXHAUSTED", 0) > 0
        assert metrics["rolloutscope.collector.items.retried"]["traces"] > 0
        assert c.count() == len(names) * rounds * size
    finally:
        c.stop()


def test_run_sender_reports_its_acks(collector, tmp_path):
    result = run_sender("batches", "http-protobuf", collector.http, "one", "2", "10",
                        str(tmp_path / "acks"))
    assert result == {"acked": 2, "failed": 0}
    assert acked(tmp_path / "acks") == [0, 1]


@pytest.mark.parametrize(("flag", "expected"), [(None, True), ("--commit-when-idle", True),
                                                ("--no-commit-when-idle", False)])
def test_serve_commit_when_idle_option_reaches_the_collector_config(tmp_path, flag, expected):
    from rolloutscope.cli import build_parser
    from rolloutscope.cli.serve import config_from_args

    argv = ["serve", "--db", str(tmp_path / "run.duckdb")] + ([flag] if flag else [])
    assert config_from_args(build_parser().parse_args(argv)).commit_when_idle is expected


def test_the_served_collector_froze_its_set_up_heap(collector):
    # rolloutscope serve, once set up, moves what lives as long as the process (the modules of
    # DuckDB, Arrow, gRPC, aiohttp; the service) out of the garbage collector's walks
    gc = collector.client.metrics()["gc"]
    assert gc["frozen_objects"] > 50_000, gc
    assert len(gc["collections"]) == 3 and all(n >= 0 for n in gc["collections"]), gc


def test_serve_store_threads_sets_the_run_files_duckdb_threads(tmp_path):
    from rolloutscope.cli import build_parser
    from rolloutscope.cli import UsageError
    from rolloutscope.cli.serve import config_from_args

    def config(*flags: str):
        return config_from_args(build_parser().parse_args(
            ["serve", "--db", str(tmp_path / "run.duckdb"), *flags]))

    assert config().store_threads is None  # DuckDB's default: one per core
    with pytest.raises(UsageError, match="store_threads must be positive, got 0"):
        config("--store-threads", "0")
    # 3: a count DuckDB's default (one per core) does not give on the machines this runs on
    c = start_collector(tmp_path / "three.duckdb", "--store-threads", "3")
    try:
        threads = c.client.query_records("SELECT current_setting('threads') AS n")[0]["n"]
    finally:
        c.stop()
    assert int(threads) == 3
