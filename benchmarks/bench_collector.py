"""Sustained OTLP/HTTP ingest into the collector vs. a receiver that only parses.

Several sender processes post the same pre-encoded protobuf batches (1,000 spans each, with
the attributes Gym spans carry) over loopback, back to back, retrying on 429. Measured in the
same run, ``--rounds`` times each (the receivers in turn within a round), medians printed:

* spans/s acknowledged (for a collector: committed to the DuckDB file, checked by a count);
* receiver CPU µs per span (user+system of the receiver process, from /proc);
* p50/p99 request latency;
* for a collector, receiver CPU µs per span again counting its graceful shutdown, which
  commits what is queued and checkpoints the WAL into the file (a collector that deferred
  checkpoint work past the measured window would otherwise look cheaper than it is). The
  target is judged on this figure.

The receivers: an aiohttp server that reads each body and parses it with the same protobuf
messages and stores nothing (the baseline: the floor any receiver pays); the collector as
served; and the collector read while it ingests, by a query to its endpoint every second (as a
watched live dashboard reads it). A reader gets DuckDB's threads back from the writer, which
commits on one while nothing reads (``RunStore``): the second collector shows what that costs,
its queries' own CPU included. ``bench_ingest.py`` measures the collector against the code
before its compiled decoder and grouped commits.
Run:  .venv/bin/python benchmarks/bench_collector.py [--rounds 3] [--batches 200]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rolloutscope.cli.serve import DASHBOARD_READY_PREFIX, READY_PREFIX
from rolloutscope.store.remote import CollectorClient
from rolloutscope.collectors.otlp.encode import fill_attributes
from rolloutscope.vocabulary import Attr, ResourceAttr

SPANS_PER_BATCH = 1_000
TARGET_US = 6.0
BASELINE = "parse-only baseline"
COLLECTORS = (("collector (committed)", False), ("  read every second", True))
READ_EVERY_S = 1.0
T0 = 1_700_000_000_000_000_000


def make_batch(seed: int, run_id: str = "bench", t0: int = T0) -> bytes:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    fill_attributes(rs.resource.attributes, {ResourceAttr.SERVICE_NAME: "nemo-gym/agent",
                                             ResourceAttr.RUN_ID: run_id})
    ss = rs.scope_spans.add()
    ss.scope.name = "bench"
    for i in range(SPANS_PER_BATCH):
        span = ss.spans.add()
        span.trace_id = (seed * SPANS_PER_BATCH + i + 1).to_bytes(16, "big")
        span.span_id = (seed * SPANS_PER_BATCH + i + 1).to_bytes(8, "big")
        span.parent_span_id = (i + 7).to_bytes(8, "big")
        span.name = "gym.model.chat_completions"
        span.kind = 2
        span.start_time_unix_nano = t0 + i * 1000
        span.end_time_unix_nano = t0 + i * 1000 + 500
        fill_attributes(span.attributes, {
            Attr.ROLLOUT_ID: f"r{seed}-{i}-a1", "nemo.gym.server.name": "agent",
            "http.route": "/v1/chat/completions", "http.response.status_code": 200,
            "gen_ai.usage.output_tokens": 512})
    return request.SerializeToString()


# -- roles run in child processes ---------------------------------------------------------
def sender(port: int, batches: int, seed: int, run_id: str = "bench", t0: int = T0,
           rate: float = 0.0) -> None:
    """``batches`` requests as fast as answered, or paced at ``rate`` spans/s (> 0); each
    batch's spans start ``t0`` plus one second a batch (a run's head moving on)."""
    bodies = [make_batch(seed * 1000 + b, run_id, t0 + b * 10**9) for b in range(batches)]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    latencies, retries = [], 0
    print("ready", flush=True)
    sys.stdin.readline()  # the parent starts every sender at once
    started = time.perf_counter()
    for k, body in enumerate(bodies):
        if rate > 0:
            time.sleep(max(0.0, started + k * SPANS_PER_BATCH / rate - time.perf_counter()))
        while True:
            t = time.perf_counter()
            conn.request("POST", "/v1/traces", body=body,
                         headers={"Content-Type": "application/x-protobuf"})
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                latencies.append(time.perf_counter() - t)
                break
            if response.status != 429:
                raise SystemExit(f"unexpected HTTP {response.status}")
            retries += 1
            time.sleep(float(response.getheader("Retry-After", "1")) / 20)
    print(json.dumps({"spans": len(bodies) * SPANS_PER_BATCH, "retries": retries,
                      "elapsed": time.perf_counter() - started, "latencies": latencies}),
          flush=True)


def parse_only(port_file: str) -> None:
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        ExportTraceServiceRequest.FromString(body)
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def main() -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/traces", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        Path(port_file).write_text(str(site._server.sockets[0].getsockname()[1]))
        await asyncio.Event().wait()

    asyncio.run(main())


# -- the parent -----------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(port: int, pid: int, senders: int, batches: int, *, read: bool = False,
          run_id: str = "bench", t0: int = T0, rate: float = 0.0) -> dict:
    """``senders`` processes sending ``batches`` requests each (``rate``: spans/s in all,
    0 as fast as answered) into run ``run_id`` from ``t0``."""
    procs = [subprocess.Popen([sys.executable, __file__, "--role", "sender", "--port", str(port),
                               "--batches", str(batches), "--seed", str(s),
                               "--run-id", run_id, "--t0", str(t0),
                               "--rate", str(rate / senders)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for s in range(senders)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    done = threading.Event()
    reads: list[int] = []

    def reader() -> None:  # as the run starts, then every READ_EVERY_S until it ends
        client = CollectorClient(f"http://127.0.0.1:{port}")
        while True:
            reads.append(client.query_records("SELECT count(*) AS n FROM spans")[0]["n"])
            if done.wait(READ_EVERY_S):
                return

    watcher = threading.Thread(target=reader, daemon=True) if read else None
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    if watcher:
        watcher.start()
    results = [json.loads(p.stdout.readline()) for p in procs]
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    done.set()
    if watcher:
        watcher.join()
    for p in procs:
        p.wait()
    spans = sum(r["spans"] for r in results)
    latencies = sorted(x for r in results for x in r["latencies"])
    return {"spans": spans, "wall_s": wall, "spans_per_s": spans / wall, "cpu0_s": cpu0,
            "reads": len(reads),
            "cpu_us_per_span": cpu / spans * 1e6, "retries": sum(r["retries"] for r in results),
            "p50_ms": latencies[len(latencies) // 2] * 1e3,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3}


def start_collector(db: Path) -> tuple[subprocess.Popen, int]:
    # served as users serve it, with its live dashboard; measured once both are up, so the
    # dashboard's one-time import (seconds of CPU) is not charged to the spans
    proc = subprocess.Popen([sys.executable, "-m", "rolloutscope", "serve", "--db", str(db),
                             "--otlp-http-port", "0", "--otlp-grpc-port", "0",
                             "--dashboard-port", "0"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith(READY_PREFIX), line
    http = dict(p.split("=", 1) for p in line[len(READY_PREFIX):].split())["http"]
    dashboard = proc.stdout.readline()
    assert dashboard.startswith(DASHBOARD_READY_PREFIX), dashboard
    return proc, int(http.rsplit(":", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", default="parent")
    parser.add_argument("--port", type=int)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--senders", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--run-id", default="bench")
    parser.add_argument("--t0", type=int, default=T0)
    parser.add_argument("--rate", type=float, default=0.0)
    args = parser.parse_args()
    if args.role == "sender":
        return sender(args.port, args.batches, args.seed, args.run_id, args.t0, args.rate)
    if args.role == "parse-only":
        return parse_only(args.port_file)

    print(f"before: {load()}", flush=True)
    rounds: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            port_file = Path(tmp) / f"port{round_}"
            parser_only = subprocess.Popen([sys.executable, __file__, "--role", "parse-only",
                                            "--port-file", str(port_file)])
            deadline = time.monotonic() + 60
            while not port_file.exists() or not port_file.read_text():
                assert time.monotonic() < deadline and parser_only.poll() is None
                time.sleep(0.05)
            rounds.setdefault(BASELINE, []).append(
                drive(int(port_file.read_text()), parser_only.pid, args.senders, args.batches))
            parser_only.terminate()
            parser_only.wait()
            for k, (name, read) in enumerate(COLLECTORS):
                db = Path(tmp) / f"bench{round_}-{k}.duckdb"
                rounds.setdefault(name, []).append(
                    run_collector(db, args.senders, args.batches, read=read))
                db.unlink(missing_ok=True)

    print(f"{os.cpu_count()} CPUs; {args.senders} senders x {args.batches} batches x "
          f"{SPANS_PER_BATCH} spans (OTLP/HTTP protobuf, loopback); medians of {args.rounds}")
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
           for name, rs in rounds.items()}
    for name, r in med.items():
        print(f"{name:<28} {r['spans_per_s']:>10,.0f} spans/s  {r['cpu_us_per_span']:6.2f} µs "
              f"receiver CPU/span  p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  "
              f"429-retries {r['retries']:.0f}")
    base = med[BASELINE]
    for name, _ in COLLECTORS:
        r, rs = med[name], rounds[name]
        lost = sum(x["spans"] - x["committed"] for x in rs)
        print(f"{name.strip()}: CPU/span per round "
              + " / ".join(f"{x['cpu_us_per_span']:.2f}" for x in rs)
              + f" µs; including the shutdown (drain + final checkpoint) "
              f"{r['with_shutdown_us']:.2f} µs; "
              + ("zero loss" if not lost else f"LOST {lost:,} acknowledged spans")
              + (f"; {r['reads']:.0f} queries" if r["reads"] else ""))
        print(f"  ratio to the {BASELINE}: throughput "
              f"{r['spans_per_s'] / base['spans_per_s']:.2f}x, CPU per span "
              f"{r['cpu_us_per_span'] / base['cpu_us_per_span']:.2f}x")
    # judged with the shutdown: checkpoint work left past the measured window counts
    whole = med[COLLECTORS[0][0]]["with_shutdown_us"]
    print(f"target: receiver CPU per span <= {TARGET_US:.0f} µs, counting the shutdown: "
          f"{whole:.2f} µs, {'met' if whole <= TARGET_US else 'missed'}")
    print(f"after: {load()}")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def run_collector(db: Path, senders: int, batches: int, *, read: bool = False) -> dict:
    collector, port = start_collector(db)
    try:
        measured = drive(port, collector.pid, senders, batches, read=read)
        measured["committed"] = CollectorClient(f"http://127.0.0.1:{port}").query_records(
            "SELECT count(*) AS n FROM spans")[0]["n"]
    except BaseException:
        collector.kill()  # not left running, holding the caller's output open
        collector.wait()
        raise
    collector.terminate()
    # reaped here rather than by Popen.wait(): the rusage holds the CPU of its shutdown
    _, _, usage = os.wait4(collector.pid, 0)
    collector.returncode = 0
    measured["with_shutdown_us"] = (usage.ru_utime + usage.ru_stime - measured["cpu0_s"]
                                    ) / measured["spans"] * 1e6
    return measured


if __name__ == "__main__":
    main()
