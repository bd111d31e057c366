"""What deriving rows as commits land adds to a collector, per span, on a large run.

A collector's writer derives a pass about every 50,000 spans (``derived.PASS_AFTER_SPANS``).
This appends passes of that size to a copy of RUN and times ``derived.derive`` on each, in
process, the pass's CPU and wall time per span: medians of --passes passes, after one warm-up
pass. A pass is what a collector receives in a stretch of the run: the --spans spans that
ended first from the middle of the run on, with their events, moved past the run's end under
new span ids. Spans are sent as they end, so a pass holds every kind the run
has; the run's last rows by row id would not (a generator's commit holds its rows kind by
kind: the synthetic 10^8 run's last 50,000 are all parked stays).

Three ways, on the same copy, in turn round by round: as a collector's writer derives now
(``held``: the pass reads the Arrow slices the writer inserted, ``derived.Held``), copying
its spans into memory from the table once (``copied``, ``derived.PASS_COPY_RATIO = 0``: what a
pass does when its writer did not insert every row since the last), and the baseline reading
them where they lie, by row id (``PASS_COPY_MAX_SPANS = 0``; DuckDB keeps no row-id bounds per
row group, so each read by row id scans every row id of the table, a cost that grows with the
run).

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


def source(con: duckdb.DuckDBPyConnection, n: int) -> int:
    """Held in ``temp.main.src_spans`` and ``src_events``: the ``n`` spans that ended first
    from the middle of the run on, and their events. Returns the offset
    between passes (the run's length)."""
    total, first, last = con.execute(
        "SELECT count(*), min(start_ns), max(end_ns) FROM spans").fetchone()
    mid = first + (last - first) // 2
    con.execute("CREATE OR REPLACE TEMP TABLE src_spans AS SELECT * FROM spans "
                f"WHERE end_ns >= {mid} ORDER BY end_ns LIMIT {int(n)}")
    con.execute("CREATE OR REPLACE TEMP TABLE src_events AS SELECT e.* FROM span_events e "
                "SEMI JOIN temp.main.src_spans p ON p.trace_id = e.trace_id "
                "AND p.span_id = e.span_id "
                "WHERE e.ts_ns >= (SELECT min(start_ns) FROM temp.main.src_spans)")
    return last - first + 10**9


def mix(con: duckdb.DuckDBPyConnection) -> str:
    """The held pass's spans by name: the five commonest and how many names in all."""
    names = con.execute("SELECT name, count(*) FROM temp.main.src_spans GROUP BY name "
                        "ORDER BY 2 DESC").fetchall()
    top = ", ".join(f"{name} {count:,}" for name, count in names[:5])
    return f"{len(names)} span names; the commonest {top}"


def append_pass(con: duckdb.DuckDBPyConnection, length: int, k: int) -> derived.Held:
    """The held spans (``source``) and their events again, ``k`` run lengths later, inserted
    as a collector's writer inserts them (Arrow slices), which it holds for its next pass."""
    off = length * k
    held = derived.Held()
    con.execute("BEGIN")
    for table, sql in (
            ("spans", f"SELECT * REPLACE (start_ns + {off} AS start_ns, end_ns + {off} AS end_ns, "
                      f"upper(left(md5(span_id || '.{k}'), 16)) AS span_id) "
                      "FROM temp.main.src_spans ORDER BY end_ns"),
            ("span_events", f"SELECT * REPLACE (ts_ns + {off} AS ts_ns, "
                            f"upper(left(md5(span_id || '.{k}'), 16)) AS span_id) "
                            "FROM temp.main.src_events ORDER BY ts_ns")):
        rows = con.execute(sql).to_arrow_table()
        con.from_arrow(rows.__arrow_c_stream__()).insert_into(table)
        held.add(table, rows)
    con.execute("COMMIT")
    return held


# (label, PASS_COPY_RATIO, PASS_COPY_MAX_SPANS, whether the pass is given the writer's slices)
WAYS = (("held", derived.PASS_COPY_RATIO, derived.PASS_COPY_MAX_SPANS, True),
        ("copied", 0, derived.PASS_COPY_MAX_SPANS, False),
        ("by row id", 0, 0, False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--spans", type=int, default=derived.PASS_AFTER_SPANS)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    print(f"load {os.getloadavg()}")
    shipped = (derived.PASS_COPY_RATIO, derived.PASS_COPY_MAX_SPANS)
    got: dict[str, list[tuple[float, float]]] = {label: [] for label, *_ in WAYS}
    with tempfile.TemporaryDirectory(dir=args.run.parent) as tmp:
        copy = Path(tmp) / "run.duckdb"
        shutil.copy(args.run, copy)
        with RunStore(copy) as store:  # up to date with this version (derived on first write)
            spans = store.query("SELECT count(*) FROM spans")[0][0]
        con = duckdb.connect(str(copy))
        try:
            length = source(con, args.spans)
            size = con.execute("SELECT count(*) FROM temp.main.src_spans").fetchone()[0]
            print(f"{args.run}: {spans:,} spans; passes of {size:,} ({mix(con)})")
            k = 1
            for i in range(args.passes + 1):  # the ways in turn, so that load falls on each
                for label, ratio, most, with_held in WAYS:
                    held = append_pass(con, length, k)
                    k += 1
                    derived.PASS_COPY_RATIO, derived.PASS_COPY_MAX_SPANS = ratio, most
                    cpu, wall = time.process_time(), time.perf_counter()
                    n = derived.derive(con, held=held if with_held else None)
                    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                    derived.PASS_COPY_RATIO, derived.PASS_COPY_MAX_SPANS = shipped
                    assert held.passes == int(with_held), label
                    if i:  # the first round warms up
                        got[label].append((cpu / n * 1e6, wall / n * 1e6))
        finally:
            con.close()
    results = {}
    for label, values in got.items():
        cpu = statistics.median(c for c, _ in values)
        wall = statistics.median(w for _, w in values)
        results[label] = cpu
        print(f"  {label:10s} CPU {cpu:6.2f} us a span, wall {wall:6.2f} us "
              f"(passes' CPU: {', '.join(f'{c:.1f}' for c, _ in values)})")
    base = results["by row id"]
    print(f"load {os.getloadavg()}; CPU per span: held {results['held']:.2f} us, copied "
          f"{results['copied']:.2f} us, by row id {base:.2f} us: held/by row id "
          f"{results['held'] / base:.2f}x, held/copied {results['held'] / results['copied']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
