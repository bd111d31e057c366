"""Fleet-sized fan-in: 1,000 OTLP/HTTP exporters, each holding one kept-alive connection, send
10 exports of 5 spans each to one collector (``rolloutscope serve``, default settings, loopback).

Every connection is open before any sends (all 1,000 are held at once); each then sends its
exports one after another over its own connection, as a stock exporter does over its pooled one.
Nothing is retried: any connection error or non-200 is counted. Measured from the moment all
are connected until every answer is in: wall time, the collector's CPU per span (from
/proc/PID/stat), its resident memory after, the spans stored, the rows its commits held. The
baseline, in the same run, sends the same 10,000 requests of the same spans from a fleet of 100
(100 requests each), so the difference is what holding and serving ten times the connections
costs; fewer requests in flight also make smaller group commits, which the rows per commit
show (a commit holds at most the requests in flight). Each figure is the median of
``--rounds``, a fresh collector per measurement, fan-in and baseline in turn within a round.
One more run, with ``--max-connections 512`` (the cap before it was sized from the open-file
limit), shows what a fleet past the cap meets when it does not retry.

``--protocol grpc``: the same over OTLP/gRPC, each exporter a channel with a connection of its
own, RESOURCE_EXHAUSTED retried after its RetryInfo as the stock exporter does (and counted);
no capped run (a channel past the cap keeps reconnecting, and the fleet waits for all).

The sender runs in this process, on the same cores as the collector.
Run:  .venv/bin/python benchmarks/bench_fanin.py [--protocol http|grpc] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.collectors.conftest import start_collector  # noqa: E402
from tests.collectors.fanin import fleet, grpc_fleet  # noqa: E402

PATIENT = ("--header-timeout-s", "300", "--body-timeout-s", "300")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def measure(protocol: str, connections: int, requests: int, spans: int, *extra: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        c = start_collector(Path(tmp) / "run.duckdb", *PATIENT, *extra)
        try:
            cpu = _cpu_s(c.process.pid)
            if protocol == "http":
                result = fleet(c.http, "bench", connections=connections, requests=requests,
                               spans=spans)
            else:
                result = grpc_fleet(c.grpc, "bench", connections=connections,
                                    requests=requests, spans=spans)
            cpu = _cpu_s(c.process.pid) - cpu  # includes the connecting, a short part
            rss = _rss_mib(c.process.pid)
            stored = c.count()
            metrics = c.client.metrics()
            peak = metrics["connections"]["http"]["peak"]
            writer = metrics["writer"]
        finally:
            c.stop()
    return {"wall_s": result.sent_s, "connect_s": result.connected_s,
            "us_per_span": cpu / result.spans_sent * 1e6 if result.spans_sent else 0.0,
            "rss_mib": rss, "stored": stored, "sent": result.spans_sent,
            "errors": sum(result.errors.values()), "error_kinds": dict(result.errors),
            "not_200": sum(n for s, n in result.statuses.items() if s not in (200, "OK")),
            "peak": peak,
            "rows_per_commit": writer["committed_rows"] / max(1, writer["commits"])}


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--spans", type=int, default=5)
    args = parser.parse_args()
    total = args.connections * args.requests
    print(f"before: load average {_load()} on {os.cpu_count()} CPUs")
    print(f"{total:,} OTLP/{'HTTP' if args.protocol == 'http' else 'gRPC'} requests of "
          f"{args.spans} spans; medians of {args.rounds}")
    rows = {"fan-in": (args.connections, args.requests),
            "baseline": (100, total // 100)}
    runs: dict[str, list[dict]] = {name: [] for name in rows}
    started = time.monotonic()
    for _ in range(args.rounds):
        for name, (conns, reqs) in rows.items():
            runs[name].append(measure(args.protocol, conns, reqs, args.spans))
    base = statistics.median(r["wall_s"] for r in runs["baseline"])
    for name, (conns, reqs) in rows.items():
        rs = runs[name]
        wall = statistics.median(r["wall_s"] for r in rs)
        us = statistics.median(r["us_per_span"] for r in rs)
        rss = statistics.median(r["rss_mib"] for r in rs)
        per_round = " / ".join(f"{r['wall_s']:.2f}" for r in rs)
        rows_per_commit = statistics.median(r["rows_per_commit"] for r in rs)
        lost = sum(r["sent"] - r["stored"] for r in rs)
        errors = sum(r["errors"] for r in rs)
        refused = sum(r["not_200"] for r in rs)
        print(f"{name:>8}: {conns:>5,} connections x {reqs:>5,} requests: {wall:6.2f} s "
              f"[{per_round}] ({total / wall:,.0f} requests/s), {us:.1f} us collector CPU/span, "
              f"{rows_per_commit:,.0f} rows a commit, {rss:.0f} MiB RSS after"
              + (f", peak {max(r['peak'] for r in rs):,} connections"
                 if args.protocol == "http" else "") + "; "
              f"every run: {errors} errors, {refused} refusals, {lost} spans sent and not stored; "
              f"{wall / base:.2f}x the baseline")
    capped = None if args.protocol == "grpc" else measure(
        args.protocol, args.connections, args.requests, args.spans, "--max-connections", "512")
    print(f"  capped: --max-connections 512, one run: {capped['stored']:,} of "
          f"{capped['sent']:,} spans sent stored; connection errors {capped['error_kinds']}, "
          f"non-200 {capped['not_200']}, of {args.connections:,} exporters that do not retry"
          if capped else "  capped: not run over gRPC")
    print(f"after: load average {_load()} ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
