"""Collectors on a Ray cluster of several nodes (``ray.cluster_utils.Cluster``: a head and two
more nodes, each its own raylet, on this machine), one per node, writing one lake: senders
export to different nodes' collectors, every acknowledged span is in the lake once and
attributable to the collector that received it, and a Gym rollout and its RL try received on two
nodes are one row. Placed from Python (``place_collectors``) and by ``rolloutscope serve --ray``
attached to the cluster. Bounded by generous deadlines, never by timing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from rolloutscope.store import RunStore
from rolloutscope.store.lake import writer_rows
from tests.collectors.conftest import acked, run_sender
from tests.lake.test_cross_writer_joins import RUN as JOINED, export, spans_of_one_try

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

NODES = 3
START_DEADLINE_S = 300  # three raylets starting on a loaded machine


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    env_address = os.environ.pop("RAY_ADDRESS", None)
    c = Cluster(initialize_head=True,
                head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for _ in range(NODES - 1):
            c.add_node(num_cpus=1)
        c.wait_for_nodes(timeout=START_DEADLINE_S)
        ray.init(address=c.address, log_to_driver=False)
        deadline = time.monotonic() + START_DEADLINE_S
        while len([n for n in ray.nodes() if n["Alive"]]) < NODES:
            assert time.monotonic() < deadline, ray.nodes()
            time.sleep(0.5)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        if env_address is not None:
            os.environ["RAY_ADDRESS"] = env_address


def _check_lake(lake: str, sent: dict[str, tuple[str, int, int]], writers: dict[str, str]
                ) -> None:
    """sent: run id -> (collector's writer id, batches acknowledged, spans a batch); writers:
    node -> writer id. Every acknowledged span once, each run written by the collector it was
    sent to; the Gym rollout and its RL try (sent to two nodes) one row."""
    with RunStore(lake, read_only=True) as store:
        rows = {r: (n, d) for r, n, d in store.query(
            "SELECT run_id, count(*), count(DISTINCT (trace_id, span_id)) FROM spans "
            "GROUP BY 1")}
        authors = {r: a for r, a in store.query(
            "SELECT DISTINCT t.run_id, s.author FROM spans t "
            "JOIN ducklake_snapshots('lake') s USING (snapshot_id)")}
        by_author = dict(store.query(
            "SELECT t.name, s.author FROM spans t "
            "JOIN ducklake_snapshots('lake') s USING (snapshot_id) WHERE t.run_id = ?",
            [JOINED]))
        by_writer = dict(writer_rows(store.raw_connection()))
        attempts = store.query("SELECT dialect, prompt_idx, attempt FROM rollout_attempts "
                               "WHERE run_id = ?", [JOINED])
        gym = store.query("SELECT prompt_idx, rl_attempt FROM gym_rollouts WHERE run_id = ?",
                          [JOINED])
    for run_id, (writer, batches, size) in sent.items():
        assert batches >= 1, run_id
        assert rows[run_id] == (batches * size, batches * size), run_id  # each span once
        assert authors[run_id] == writer, run_id
    assert len(set(writers.values())) == NODES
    assert set(by_writer) <= set(writers.values())
    assert by_author["gym.rollout"] != by_author["rl.rollout.attempt"]
    assert attempts == [("rl", 3, 1)] and gym == [(3, 1)]


def test_place_collectors_puts_one_on_each_node_and_all_write_one_lake(cluster, tmp_path):
    from rolloutscope.collectors.ray import place_collectors, stop_collectors

    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    placed = place_collectors(lake)
    try:
        alive = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        assert sorted(p.node_id for p in placed) == alive and len(alive) == NODES
        sent = {}
        for i, p in enumerate(placed[1:], start=1):  # two nodes' collectors
            ack = tmp_path / f"n{i}.acks"
            result = run_sender("batches", "http-protobuf", p.http, f"node-{i}", "4", "25",
                                str(ack), timeout_s=240)
            assert result["acked"] == len(acked(ack)) == 4
            sent[f"node-{i}"] = (p.writer_id, 4, 25)
        spans = spans_of_one_try(prompt_idx=3, attempt=1)
        export(placed[1].http, spans["gym-agent"])
        export(placed[2].http, spans["nemo-rl"])
    finally:
        ended = stop_collectors(placed)
    assert ended == []
    _check_lake(lake, sent, {p.node_id: p.writer_id for p in placed})


def test_serve_ray_attaches_to_the_cluster_and_places_a_collector_per_node(cluster, tmp_path):
    from rolloutscope.cli.serve import READY_PREFIX
    from rolloutscope.cli.serve_ray import ALL_READY_PREFIX

    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rolloutscope", "serve", "--ray", "--ray-address",
         cluster.address, "--db", lake, "--otlp-http-port", "0", "--otlp-grpc-port", "0",
         "--no-dashboard"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={k: v for k, v in os.environ.items()
             if k not in ("RAY_ADDRESS", "OTEL_EXPORTER_OTLP_ENDPOINT")})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while not any(line.startswith(ALL_READY_PREFIX) for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        placed = [dict(f.split("=", 1) for f in line[len(READY_PREFIX):].split())
                  for line in lines if line.startswith(READY_PREFIX)]
        assert f"{ALL_READY_PREFIX}{NODES} node(s)" in "".join(lines)
        assert sorted(p["node"] for p in placed) == sorted(
            n["NodeID"] for n in ray.nodes() if n["Alive"])
        sent = {}
        for i, p in enumerate(placed[:2]):
            ack = tmp_path / f"s{i}.acks"
            result = run_sender("batches", "http-protobuf", p["http"], f"serve-{i}", "3", "20",
                                str(ack), timeout_s=240)
            assert result["acked"] == len(acked(ack)) == 3
            sent[f"serve-{i}"] = (p["writer"], 3, 20)
        spans = spans_of_one_try(prompt_idx=3, attempt=1)
        export(placed[0]["http"], spans["gym-agent"])
        export(placed[1]["http"], spans["nemo-rl"])
        proc.send_signal(signal.SIGTERM)  # the driver alone: it stops every actor
        assert proc.wait(180) == 0, "".join(lines)
        reader.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert "everything received is committed" in "".join(lines)
    _check_lake(lake, sent, {p["node"]: p["writer"] for p in placed})
