"""Incident views over synthetic runs of growing size: ms per view and for the whole `incidents`
union, each next to the same view in its plain formulation (the baseline, measured in the same
run: the view texts the rewrites replaced, tests/store/reference_views/), median of the same
repeats taken in turns, and how each grows from one size to the next.

    .venv/bin/python benchmarks/bench_incidents.py [--spans 100000 1000000 10000000]
        [--repeats 3]             # at least 3; the median is quoted
        [--scale-db RUN.duckdb]   # also a scale-16k replay (rolloutscope scenario run scale-16k)
        [--data-dir DIR]          # keep the synthetic runs there and reuse them (they take
                                  #   minutes and GBs to make at 10M spans)
        [--views DIR]             # time the views in DIR's NN_<view>.sql files instead of
                                  #   the packaged ones of the same names
        [--baseline DIR]          # the baseline's view texts (default: the plain formulations)
        [--also VIEW ...]         # time these views too (read as Arrow, no target): the base
                                  #   views the incident views and the dashboard read

Targets: every view <= 500 ms and the whole incidents view <= 1 s at 10M spans; growth no
worse than linear (x10 spans -> at most about x10 time). Times are wall clock on a shared
machine: the load average is printed before and after each run file, and the ratio to the
baseline taken in turns with it is the figure to read when the machine is busy.
"""

from __future__ import annotations

import argparse
from contextlib import closing
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import duckdb

from rolloutscope.cli.info_incidents import INCIDENT_KINDS
from rolloutscope.store import RunStore, views

from synthetic import generate  # noqa: E402 - benchmarks/ is the script's own folder

_FILE = re.compile(r"^\d\d_([a-z_]+)\.sql$")
REFERENCE = Path(__file__).parents[1] / "tests" / "store" / "reference_views"
KINDS = (*INCIDENT_KINDS, "incidents")


def _texts(folder: Path | None) -> dict[str, str]:
    """The packaged view texts, with DIR's over them."""
    texts = dict(views.definitions())
    if folder is not None:
        for path in sorted(folder.iterdir()):
            m = _FILE.match(path.name)
            if m:
                texts[m.group(1)] = path.read_text()
    return texts


def _install(cur: duckdb.DuckDBPyConnection, texts: dict[str, str]) -> None:
    for name, _ in views.definitions():
        cur.execute(views.as_temporary(texts[name]))


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _once_ms(cur: duckdb.DuckDBPyConnection, sql: str, *, arrow: bool = False) -> float:
    t = time.perf_counter()
    result = cur.execute(sql)
    result.to_arrow_table() if arrow else result.fetchall()
    return (time.perf_counter() - t) * 1000


def measure(path: Path, label: str, repeats: int, views_dir: Path | None,
            baseline_dir: Path, *, targets: bool,
            also: tuple[str, ...] = ()) -> dict[str, tuple[float, float]]:
    """(ms, baseline ms) per incident view and for the union, printed as they come."""
    out: dict[str, tuple[float, float]] = {}
    # cursors of their own: store.cursor() hands one thread the same cursor each time when the
    # file's views are older than this checkout's, and the two sets of views must not mix
    with RunStore(path, read_only=True) as store, closing(store.new_cursor()) as new, \
            closing(store.new_cursor()) as base:
        assert new is not base
        for cur in (new, base):  # a file of an older version: its tables as this one's
            store.install_legacy_tables(cur)
        _install(new, _texts(views_dir))
        _install(base, _texts(baseline_dir))
        spans = new.execute("SELECT count(*) FROM spans").fetchall()[0][0]
        print(f"\n{label}: {spans:,} spans; {_uptime()}", flush=True)
        print(f"  {'view':<28} {'ms':>8} {'baseline':>9} {'ratio':>6} {'rows':>7}")
        for kind in (*KINDS, *also):
            sql = f"SELECT * FROM {kind}"
            arrow = kind in also
            n, m = (c.execute(sql).to_arrow_table().num_rows for c in (new, base))  # warm both
            assert n == m, f"{kind}: {n} rows, the baseline {m}"
            times_new, times_base = [], []
            for _ in range(repeats):  # in turns, so load changes reach both alike
                times_base.append(_once_ms(base, sql, arrow=arrow))
                times_new.append(_once_ms(new, sql, arrow=arrow))
            ms, ref = statistics.median(times_new), statistics.median(times_base)
            out[kind] = (ms, ref)
            target = 1000 if kind == "incidents" else 500
            over = targets and not arrow and ms > target
            print(f"  {kind:<28} {ms:8.1f} {ref:9.1f} {ms / ref:6.2f} {n:7,}"
                  f"{'  OVER TARGET' if over else ''}", flush=True)
        print(f"  ({_uptime()})")
    return out


def _synthetic(data_dir: Path, spans: int) -> Path:
    path = data_dir / f"synthetic-{spans}.duckdb"
    if not path.exists():
        t = time.perf_counter()
        partial = data_dir / f"synthetic-{spans}.partial.duckdb"
        partial.unlink(missing_ok=True)
        generate(partial, spans=spans)
        partial.rename(path)
        print(f"(generated the {spans:,}-span run in {time.perf_counter() - t:.0f} s: {path})")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale-db", type=Path, default=None,
                    help="a scale-16k run store (rolloutscope scenario run scale-16k --db ...)")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--views", type=Path, default=None)
    ap.add_argument("--baseline", type=Path, default=REFERENCE)
    ap.add_argument("--also", nargs="+", default=[], metavar="VIEW",
                    choices=[name for name, _ in views.definitions()])
    args = ap.parse_args()
    if args.repeats < 3:
        ap.error("--repeats must be at least 3 (the median of three or more is quoted)")
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="rs-bench-incidents-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"views: {args.views or 'packaged'}; baseline: {args.baseline}; "
          f"median of {args.repeats}; {_uptime()}")
    if args.scale_db is not None:
        measure(args.scale_db, f"16k-rollout run ({args.scale_db.name})", args.repeats,
                args.views, args.baseline, targets=True, also=tuple(args.also))
    sizes = sorted(args.spans)
    by_size = {n: measure(_synthetic(data_dir, n), f"{n:,}-span run", args.repeats, args.views,
                          args.baseline, targets=n >= 10_000_000, also=tuple(args.also))
               for n in sizes}
    steps = "x".join(f"{b / a:g}" for a, b in zip(sizes, sizes[1:])) or "no"
    print(f"\ngrowth: ms at each size, then the factor from one size to the next ({steps} more "
          f"spans), for the views and for the baseline")
    for kind in (*KINDS, *args.also):
        ms = [by_size[n][kind][0] for n in sizes]
        ref = [by_size[n][kind][1] for n in sizes]
        growth = " ".join(f"x{b / a:5.1f}" for a, b in zip(ms, ms[1:]))
        ref_growth = " ".join(f"x{b / a:5.1f}" for a, b in zip(ref, ref[1:]))
        print(f"  {kind:<28} " + " ".join(f"{m:8.1f}" for m in ms)
              + f"   {growth}   | baseline {ref_growth}")
    top = by_size[sizes[-1]]
    over = [k for k, (ms, _) in top.items()
            if k in KINDS and ms > (1000 if k == "incidents" else 500)]
    print(f"\nRESULT {sizes[-1]:,} spans: incidents {top['incidents'][0]:.0f} ms "
          f"(baseline {top['incidents'][1]:.0f} ms, ratio {top['incidents'][0] / top['incidents'][1]:.2f}); "
          f"{'targets met' if not over else 'over target: ' + ', '.join(over)}; {_uptime()}")


if __name__ == "__main__":
    main()
