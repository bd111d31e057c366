"""Incident views over a 16k-rollout run and a 10M-span run: ms per view, and the whole
`incidents` union, next to a plain count(*) over spans in the same file (the baseline).

    .venv/bin/python benchmarks/bench_incidents.py [--spans 10000000] [--repeats 5]
        [--scale-db RUN.duckdb]   # a scale-16k replay, if you have one; else generated

Targets (16k run): every view <= 500 ms, the whole incidents view <= 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rolloutscope.cli.runs import INCIDENT_KINDS
from rolloutscope.store import RunStore

from synthetic import generate  # noqa: E402 - benchmarks/ is the script's own folder


def _median_ms(store: RunStore, sql: str, repeats: int) -> float:
    times = []
    with store.cursor() as cur:
        for _ in range(repeats):
            t = time.perf_counter()
            cur.execute(sql).fetchall()
            times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def measure(path: Path, label: str, repeats: int, *, view_target_ms: float | None,
            total_target_ms: float | None) -> bool:
    with RunStore(path, read_only=True) as store:
        spans = store.query("SELECT count(*) FROM spans")[0][0]
        base = _median_ms(store, "SELECT count(*) FROM spans", repeats)
        print(f"\n{label}: {spans:,} spans; baseline count(*) {base:.1f} ms")
        ok = True
        for kind in INCIDENT_KINDS:
            ms = _median_ms(store, f"SELECT * FROM {kind}", repeats)
            over = view_target_ms is not None and ms > view_target_ms
            ok &= not over
            print(f"  {kind:<28} {ms:8.1f} ms  ({ms / base:6.1f}x count(*))"
                  f"{'  OVER TARGET' if over else ''}")
        total = _median_ms(store, "SELECT * FROM incidents", repeats)
        n = store.query("SELECT count(*) FROM incidents")[0][0]
        over = total_target_ms is not None and total > total_target_ms
        ok &= not over
        print(f"  {'incidents (all)':<28} {total:8.1f} ms  ({total / base:6.1f}x count(*)), "
              f"{n:,} incidents{'  OVER TARGET' if over else ''}")
        return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--scale-db", type=Path, default=None,
                    help="a scale-16k run store (rolloutscope scenario run scale-16k --db ...)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rs-bench-incidents-"))
    scale = args.scale_db
    if scale is None:
        scale = tmp / "scale16k.duckdb"
        generate(scale, spans=16_000 * 11)  # 16k prompts' worth of spans
    ok16k = measure(scale, f"16k-rollout run ({scale.name})", args.repeats,
                    view_target_ms=500, total_target_ms=1000)
    big = tmp / "big.duckdb"
    t = time.perf_counter()
    generate(big, spans=args.spans)
    print(f"\n(generated the {args.spans:,}-span run in {time.perf_counter() - t:.0f} s)")
    measure(big, f"{args.spans:,}-span run", args.repeats, view_target_ms=None, total_target_ms=None)
    print(f"\nRESULT 16k run: {'targets met' if ok16k else 'targets NOT met'} "
          "(each view <= 500 ms, incidents <= 1 s)")


if __name__ == "__main__":
    main()
