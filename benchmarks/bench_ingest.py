"""Collector ingest: the compiled decoder and grouped commits against what they replace, in
the same run.

The senders, bodies and parse-only baseline are bench_collector.py's (1,000-span OTLP/HTTP
protobuf requests with the attributes Gym spans carry, several sender processes back to back).
The collector runs three ways, each ``--repeats`` times (median reported):

* ``python, 50 ms``: the Python decoder (``ROLLOUTSCOPE_PYTHON_DECODER=1``) and commits ended only
  by the old bounds (50,000 rows or 50 ms): the collector before this change;
* ``python, grouped``: the Python decoder, commits grouped by size (250 ms bound, committed as
  soon as no request is arriving);
* ``compiled, grouped, heap live``: the compiled decoder, grouped commits, and the
  interpreter's whole heap walked by every full garbage collection;
* ``compiled, grouped``: the default, as ``rolloutscope serve`` runs: the same, with the heap
  of the set-up service frozen (``freeze_set_up_heap``).

For each: spans/s committed (checked by a count: zero loss), receiver CPU µs per span (its
user+system from /proc), rows per commit (the writer's own counts) and p50/p99 latency.
Run:  .venv/bin/python benchmarks/bench_ingest.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_collector import SPANS_PER_BATCH, drive  # noqa: E402

from rolloutscope.store.remote import CollectorClient  # noqa: E402

# name, environment, commit delay bound (ms), commit when idle, freeze the set-up heap
VARIANTS = (("python, 50 ms", {"ROLLOUTSCOPE_PYTHON_DECODER": "1"}, 50.0, False, False),
            ("python, grouped", {"ROLLOUTSCOPE_PYTHON_DECODER": "1"}, 250.0, True, False),
            ("compiled, grouped, heap live", {}, 250.0, True, False),
            ("compiled, grouped", {}, 250.0, True, True))


def serve(db: str, delay_ms: float, when_idle: bool, freeze: bool) -> None:
    """A collector with these commit settings; prints its HTTP port."""
    from rolloutscope.collectors.service import (
        CollectorConfig,
        CollectorService,
        freeze_set_up_heap,
    )

    async def main() -> None:
        service = CollectorService(CollectorConfig(
            db_path=Path(db), http_port=0, grpc_port=0, commit_max_delay_ms=delay_ms,
            commit_when_idle=when_idle))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(sys.stdin.fileno(), stop.set)  # the parent closes stdin to stop it

        def ready(endpoints) -> None:
            if freeze:
                freeze_set_up_heap()
            print(endpoints.http.rsplit(":", 1)[1], flush=True)

        await service.run(stop, ready)

    asyncio.run(main())


def run_variant(tmp: str, n: int, env: dict, delay_ms: float, when_idle: bool, freeze: bool,
                senders: int, batches: int) -> dict:
    db = Path(tmp) / f"ingest-{n}.duckdb"
    proc = subprocess.Popen([sys.executable, __file__, "--role", "serve", "--db", str(db),
                             "--delay-ms", str(delay_ms), "--when-idle", str(int(when_idle)),
                             "--freeze", str(int(freeze))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, **env))
    port = int(proc.stdout.readline())
    result = drive(port, proc.pid, senders, batches)
    base = f"http://127.0.0.1:{port}"
    result["committed"] = CollectorClient(base).query_records(
        "SELECT count(*) AS n FROM spans")[0]["n"]
    writer = json.loads(urllib.request.urlopen(f"{base}/metrics", timeout=30).read())["writer"]
    result["rows_per_commit"] = writer["committed_rows"] / max(1, writer["commits"])
    proc.stdin.close()
    proc.wait(timeout=120)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", default="parent")
    parser.add_argument("--db")
    parser.add_argument("--delay-ms", type=float)
    parser.add_argument("--when-idle", type=int)
    parser.add_argument("--freeze", type=int)
    parser.add_argument("--senders", type=int, default=3)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.role == "serve":
        return serve(args.db, args.delay_ms, bool(args.when_idle), bool(args.freeze))

    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    runs: dict[str, list[dict]] = {name: [] for name, *_ in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for _ in range(args.repeats):  # interleaved, so a change in load hits every variant
            for name, env, delay_ms, when_idle, freeze in VARIANTS:
                n += 1
                r = run_variant(tmp, n, env, delay_ms, when_idle, freeze, args.senders,
                                args.batches)
                assert r["committed"] == r["spans"], f"{name}: LOSS {r['committed']} of {r['spans']}"
                runs[name].append(r)
    print(f"{os.cpu_count()} CPUs; {args.senders} senders x {args.batches} batches x "
          f"{SPANS_PER_BATCH} spans (OTLP/HTTP protobuf, loopback); median of {args.repeats}; "
          f"every span sent was committed")
    med = {name: {k: statistics.median(r[k] for r in rs) for k in
                  ("spans_per_s", "cpu_us_per_span", "rows_per_commit", "p50_ms", "p99_ms")}
           for name, rs in runs.items()}
    for name, m in med.items():
        spread = ", ".join(f"{r['cpu_us_per_span']:.1f}" for r in runs[name])
        print(f"{name:<28} {m['spans_per_s']:>9,.0f} spans/s  {m['cpu_us_per_span']:6.2f} µs "
              f"CPU/span ({spread})  {m['rows_per_commit']:>8,.0f} rows/commit  "
              f"p50 {m['p50_ms']:6.1f} ms  p99 {m['p99_ms']:6.1f} ms")
    old, new = med["python, 50 ms"], med["compiled, grouped"]
    grouped = med["python, grouped"]
    print(f"ratio compiled+grouped / before: spans/s {new['spans_per_s'] / old['spans_per_s']:.2f}x,"
          f" CPU per span {new['cpu_us_per_span'] / old['cpu_us_per_span']:.2f}x "
          f"(targets >= 3x and <= 6 µs)")
    print(f"ratio grouping alone (python decoder): spans/s "
          f"{grouped['spans_per_s'] / old['spans_per_s']:.2f}x, CPU per span "
          f"{grouped['cpu_us_per_span'] / old['cpu_us_per_span']:.2f}x")
    live = med["compiled, grouped, heap live"]
    print(f"ratio compiled / python decoder (both grouped, heap live): CPU per span "
          f"{live['cpu_us_per_span'] / grouped['cpu_us_per_span']:.2f}x")
    print(f"ratio frozen set-up heap / heap live (compiled, grouped): spans/s "
          f"{new['spans_per_s'] / live['spans_per_s']:.2f}x, CPU per span "
          f"{new['cpu_us_per_span'] / live['cpu_us_per_span']:.2f}x")


if __name__ == "__main__":
    main()
