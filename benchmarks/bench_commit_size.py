"""What the store's writer alone costs per span, by rows per commit: the floor under the collector.

The collector acknowledges a request only after the commit holding its rows, so a commit holds
at most the requests in flight: three senders of 1,000-span requests (bench_collector.py) make
commits of about 3,000 rows. This measures the store's writer (``StoreWriter``, the store's
schema and settings, one DuckDB thread) committing the same decoded spans with the commits cut
at each size, nothing else in the process: no HTTP, no decode inside the window. Each figure is
the process's CPU (every thread) per span from the first submit until the store is closed,
so the checkpoints, the final one included, are counted. Each size runs in its own process, the
sizes in turn within a round; medians of ``--rounds``. The baseline is the 3,000-row commit.
The largest size is the collector's bound on a commit (``commit_max_rows``, 50,000 rows).
Run:  .venv/bin/python benchmarks/bench_commit_size.py [--rounds 3] [--batches 600]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_collector import SPANS_PER_BATCH, make_batch  # noqa: E402

SIZES = (1_000, 3_000, 10_000, 50_000)
BASELINE = 3_000


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(rows_per_commit: int, batches: int) -> dict:
    from rolloutscope.collectors.otlp.counters import CollectorCounters
    from rolloutscope.collectors.otlp.decode import PROTOBUF
    from rolloutscope.collectors.otlp.limits import DecodeLimits
    from rolloutscope.collectors.otlp.receiver import OtlpReceiver
    from rolloutscope.collectors.otlp.signals import Signal
    from rolloutscope.store import RunStore

    # decoded as the collector decodes a body; its rows never reach the receiver's enqueue
    receiver = OtlpReceiver(enqueue=None, limits=DecodeLimits(), counters=CollectorCounters())
    decoded = [receiver.decode(Signal.TRACES, make_batch(b), PROTOBUF).batch
               for b in range(batches)]
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp) / "run.duckdb")
        # commits end at rows_per_commit rows, never on time: everything is queued at once
        writer = store.writer(max_rows=rows_per_commit, max_delay_ms=600_000,
                              max_queued_rows=batches * SPANS_PER_BATCH + 1)
        start = cpu_s()
        for batch in decoded:
            writer.submit(batch)
        writer.close()
        store.close()
        spent = cpu_s() - start
        stats = writer.stats
    spans = batches * SPANS_PER_BATCH
    assert stats.committed_rows == spans, (stats.committed_rows, spans)
    return {"us_per_span": spent / spans * 1e6, "commits": stats.commits,
            "rows_per_commit": stats.committed_rows / stats.commits}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", default="parent")
    parser.add_argument("--rows-per-commit", type=int)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=600)
    args = parser.parse_args()
    if args.role == "measure":
        print(json.dumps(measure(args.rows_per_commit, args.batches)))
        return
    print(f"before: load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs")
    print(f"{args.batches * SPANS_PER_BATCH:,} spans ({SPANS_PER_BATCH:,}-span Gym-like requests, "
          f"decoded before the window); medians of {args.rounds}")
    runs: dict[int, list[dict]] = {size: [] for size in SIZES}
    for _ in range(args.rounds):
        for size in SIZES:
            out = subprocess.run(
                [sys.executable, __file__, "--role", "measure", "--rows-per-commit", str(size),
                 "--batches", str(args.batches)], check=True, capture_output=True, text=True)
            runs[size].append(json.loads(out.stdout))
    base = statistics.median(r["us_per_span"] for r in runs[BASELINE])
    for size in SIZES:
        us = statistics.median(r["us_per_span"] for r in runs[size])
        per_round = " / ".join(f"{r['us_per_span']:.2f}" for r in runs[size])
        commits = runs[size][0]["commits"]
        mark = "  (baseline: three 1,000-span senders)" if size == BASELINE else ""
        print(f"{size:>8,} rows a commit ({commits:>4} commits): {us:5.2f} µs CPU/span "
              f"[{per_round}]  ratio to the baseline {us / base:.2f}x{mark}")
    print(f"after: load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
