"""What deriving rows as commits land adds to a collector, per span, on a large run.

A collector's writer derives a pass about every 50,000 spans (``derived.PASS_AFTER_SPANS``).
This appends passes of that size to a copy of RUN (the run's own latest spans and their events,
moved past its end, new span ids) and times ``derived.derive`` on each, in process, the pass's
CPU and wall time per span: medians of --passes passes, after one warm-up pass.

Three ways, on the same copy in turn: every pass copying its spans into memory once
(``derived.PASS_COPY_RATIO = 0``), the baseline reading them where they lie, by row id, as a
pass did before (``PASS_COPY_MAX_SPANS = 0``; DuckDB keeps no row-id bounds per row group, so
each read by row id scans every row id of the table, a cost that grows with the run), and as
configured (copying where the store holds ``PASS_COPY_RATIO`` times the pass or more).

    .venv/bin/python benchmarks/bench_pass.py RUN.duckdb [--spans 50000] [--passes 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from rolloutscope.store import RunStore, derived


def source(con: duckdb.DuckDBPyConnection, n: int) -> tuple[int, int, int]:
    """(the first row id of the run's latest ``n`` spans, the run's span count, its length)."""
    total, first, last = con.execute(
        "SELECT count(*), min(start_ns), max(end_ns) FROM spans").fetchone()
    return total - n, total, last - first + 10**9


def append_pass(con: duckdb.DuckDBPyConnection, rows: tuple[int, int, int], k: int) -> None:
    """The run's latest spans (``source``) and their events again, ``k`` run lengths later."""
    lo, hi, length = rows
    off = length * k
    ids = f"upper(left(md5(span_id || '.{k}'), 16))"
    picked = f"FROM spans WHERE rowid >= {lo} AND rowid < {hi}"
    con.execute("BEGIN")
    con.execute(f"CREATE OR REPLACE TEMP TABLE picked AS SELECT trace_id, span_id {picked}")
    con.execute(f"INSERT INTO spans SELECT * REPLACE (start_ns + {off} AS start_ns, "
                f"end_ns + {off} AS end_ns, {ids} AS span_id) {picked}")
    con.execute(f"INSERT INTO span_events SELECT e.* REPLACE (e.ts_ns + {off} AS ts_ns, "
                f"upper(left(md5(e.span_id || '.{k}'), 16)) AS span_id) FROM span_events e "
                "SEMI JOIN picked p ON p.trace_id = e.trace_id AND p.span_id = e.span_id "
                f"WHERE e.ts_ns >= (SELECT min(start_ns) {picked})")
    con.execute("COMMIT")


def passes(con: duckdb.DuckDBPyConnection, rows: tuple[int, int, int], count: int,
           k0: int) -> list[tuple[float, float]]:
    """(CPU us, wall us) per span of ``count`` passes of ``rows``, after a warm-up."""
    out = []
    for i in range(count + 1):
        append_pass(con, rows, k0 + i)
        cpu, wall = time.process_time(), time.perf_counter()
        got = derived.derive(con)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if i:
            out.append((cpu / got * 1e6, wall / got * 1e6))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--spans", type=int, default=derived.PASS_AFTER_SPANS)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    print(f"load {os.getloadavg()}")
    with tempfile.TemporaryDirectory(dir=args.run.parent) as tmp:
        copy = Path(tmp) / "run.duckdb"
        shutil.copy(args.run, copy)
        with RunStore(copy) as store:  # up to date with this version (derived on first write)
            spans = store.query("SELECT count(*) FROM spans")[0][0]
        con = duckdb.connect(str(copy))
        try:
            print(f"{args.run}: {spans:,} spans; passes of {args.spans:,}")
            rows = source(con, args.spans)
            results = {}
            shipped = (derived.PASS_COPY_RATIO, derived.PASS_COPY_MAX_SPANS)
            for label, (ratio, most) in (("copied", (0, shipped[1])), ("by row id", (0, 0)),
                                         ("as configured", shipped)):
                derived.PASS_COPY_RATIO, derived.PASS_COPY_MAX_SPANS = ratio, most
                got = passes(con, rows, args.passes, 1 + (args.passes + 1) * len(results))
                cpu = statistics.median(c for c, _ in got)
                wall = statistics.median(w for _, w in got)
                results[label] = (cpu, wall)
                print(f"  {label:14s} CPU {cpu:6.2f} us a span, wall {wall:6.2f} us "
                      f"(passes' CPU: {', '.join(f'{c:.1f}' for c, _ in got)}), "
                      f"load {os.getloadavg()[0]:.1f}")
        finally:
            con.close()
    base = results["by row id"][0]
    print(f"CPU per span: copied {results['copied'][0]:.2f} us, as configured "
          f"{results['as configured'][0]:.2f} us, against {base:.2f} us by row id: "
          f"{results['copied'][0] / base:.2f}x, {results['as configured'][0] / base:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
