"""Collectors placed one per node by Ray (a local cluster here) write one lake."""

from __future__ import annotations

import os

import pytest

from rolloutscope.store import RunStore
from rolloutscope.store.lake import writer_rows
from tests.collectors.conftest import run_sender

ray = pytest.importorskip("ray", reason="the ray extra is not installed")


def test_one_collector_actor_per_node_writes_the_lake(tmp_path):
    from rolloutscope.collectors.ray import place_collectors, stop_collectors

    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        placed = place_collectors(lake)
        assert [p.node_id for p in placed] == [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        try:
            result = run_sender("batches", "http-protobuf", placed[0].http, "on-ray", "4", "25",
                                str(tmp_path / "acks"))
            assert result["acked"] == 4
        finally:
            stop_collectors(placed)
        with pytest.raises(ValueError, match="no alive Ray node"):
            place_collectors(lake, nodes=["f" * 56])
    finally:
        ray.shutdown()
    with RunStore(lake, read_only=True) as store:
        assert store.query("SELECT count(*) FROM spans WHERE run_id = 'on-ray'")[0][0] == 100
        authors = dict(writer_rows(store.raw_connection()))
    assert list(authors) == [placed[0].writer_id]
    assert int(placed[0].writer_id.split(":")[1]) != os.getpid()  # the actor's own process


@pytest.mark.parametrize("to", ["driver", "process-group"])
def test_serve_ray_places_a_collector_per_node_prints_each_and_stops_them_on_sigterm(tmp_path,
                                                                                     to):
    import signal
    import subprocess
    import sys
    import threading
    import time

    from rolloutscope.cli.serve import READY_PREFIX
    from rolloutscope.cli.serve_ray import ALL_READY_PREFIX

    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rolloutscope", "serve", "--ray", "--db", lake,
         "--otlp-http-port", "0", "--otlp-grpc-port", "0", "--no-dashboard"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={k: v for k, v in os.environ.items()
             if k not in ("RAY_ADDRESS", "OTEL_EXPORTER_OTLP_ENDPOINT")})
    lines: list[str] = []
    # a thread reads the output: the text buffer may hold lines a selector cannot see
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 180  # a local Ray starting on a loaded machine
        while not any(line.startswith(ALL_READY_PREFIX) for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        placed = [dict(f.split("=", 1) for f in line[len(READY_PREFIX):].split())
                  for line in lines if line.startswith(READY_PREFIX)]
        assert len(placed) == 1 and f"{ALL_READY_PREFIX}1 node(s)" in "".join(lines)
        assert placed[0]["http"].startswith("http://127.0.0.1:") and placed[0]["db"] == lake
        assert placed[0]["grpc"].startswith("127.0.0.1:")
        result = run_sender("batches", "http-protobuf", placed[0]["http"], "via-serve-ray",
                            "3", "20", str(tmp_path / "acks"))
        assert result["acked"] == 3
        if to == "driver":
            proc.send_signal(signal.SIGTERM)
        else:  # as a terminal's Ctrl-C does: the local Ray's actors get it too
            os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait(120)
        reader.join(30)
        # the driver alone stops cleanly; a signal to the group may end the actor first, and
        # the exit status says so
        assert rc == 0 if to == "driver" else rc in (0, 1), "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert ("everything received is committed" if rc == 0
            else "had already ended; what they acknowledged is committed") in "".join(lines)
    with RunStore(lake, read_only=True) as store:
        assert store.query("SELECT count(*) FROM spans WHERE run_id = 'via-serve-ray'")[0][0] == 60
        authors = dict(writer_rows(store.raw_connection()))
    assert list(authors) == [placed[0]["writer"]]  # the actor wrote them, not the driver


def test_serve_ray_reads_the_engines_once_for_the_cluster_from_the_driver(tmp_path):
    import signal
    import subprocess
    import sys
    import threading
    import time

    from rolloutscope.cli.serve_ray import ALL_READY_PREFIX
    from tests.engine_metrics import Engine, EngineModel, healthy

    model = EngineModel(healthy)
    engine = Engine(model.step)
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rolloutscope", "serve", "--ray", "--db", lake,
         "--otlp-http-port", "0", "--otlp-grpc-port", "0", "--no-dashboard",
         "--scrape", engine.url, "--scrape-interval-s", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={k: v for k, v in os.environ.items()
             if k not in ("RAY_ADDRESS", "OTEL_EXPORTER_OTLP_ENDPOINT")})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 180  # a local Ray starting on a loaded machine
        while not any(line.startswith(ALL_READY_PREFIX) for line in lines) \
                or model.reads < 3:
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0, "".join(lines)
        reader.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        engine.close()
    with RunStore(lake, read_only=True) as store:
        rows = store.query("SELECT DISTINCT run_id, service FROM metrics "
                           "WHERE name = 'vllm:num_requests_running'")
        reads = store.query("SELECT count(*) FROM engine_state")[0][0]
        default = store.default_run_id
    assert rows == [(default, f"127.0.0.1:{engine.port}")]
    assert 3 <= reads <= model.reads  # the reads made before the stop, none stored twice
