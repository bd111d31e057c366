"""Incident views over a 16k-rollout run and synthetic runs of growing size: ms per view and for
the whole `incidents` union, each next to a plain count(*) over spans in the same file (the
baseline, median of the same repeats), and how each grows from one size to the next.

    .venv/bin/python benchmarks/bench_incidents.py [--spans 1000000 10000000] [--repeats 5]
        [--scale-db RUN.duckdb]   # a scale-16k replay, if you have one; else generated
        [--data-dir DIR]          # keep the synthetic runs there and reuse them (they take
                                  #   minutes and GBs to make at 10M spans)
        [--views DIR]             # time the views in DIR's NN_<view>.sql files instead of
                                  #   the packaged ones of the same names (e.g. an older SQL)

Targets: every view <= 500 ms and the whole incidents view <= 1 s, on the 16k run and at 10M
spans; growth no worse than linear (x10 spans -> at most about x10 time).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

import duckdb

from rolloutscope.cli.runs import INCIDENT_KINDS
from rolloutscope.store import RunStore, views

from synthetic import generate  # noqa: E402 - benchmarks/ is the script's own folder

_FILE = re.compile(r"^\d\d_([a-z_]+)\.sql$")


def _install(cur: duckdb.DuckDBPyConnection, folder: Path | None) -> None:
    """The packaged views, then DIR's over them, as temporary views of this cursor."""
    texts = dict(views.definitions())
    if folder is not None:
        for path in sorted(folder.iterdir()):
            m = _FILE.match(path.name)
            if m:
                texts[m.group(1)] = path.read_text()
    for name, _ in views.definitions():
        cur.execute(views._CREATE.sub(f"CREATE OR REPLACE TEMP VIEW {name} AS", texts[name], 1))


def _median_ms(cur: duckdb.DuckDBPyConnection, sql: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        cur.execute(sql).fetchall()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def measure(path: Path, label: str, repeats: int, views_dir: Path | None, *,
            targets: bool) -> dict[str, float]:
    """ms per incident view and for the whole union ('incidents'), printed as they come."""
    out: dict[str, float] = {}
    with RunStore(path, read_only=True) as store, store.cursor() as cur:
        _install(cur, views_dir)
        spans = cur.execute("SELECT count(*) FROM spans").fetchall()[0][0]
        base = _median_ms(cur, "SELECT count(*) FROM spans", repeats)
        print(f"\n{label}: {spans:,} spans; baseline count(*) {base:.1f} ms; "
              f"load {os.getloadavg()[0]:.2f}")
        for kind in (*INCIDENT_KINDS, "incidents"):
            ms = out[kind] = _median_ms(cur, f"SELECT * FROM {kind}", repeats)
            target = 1000 if kind == "incidents" else 500
            n = cur.execute(f"SELECT count(*) FROM {kind}").fetchall()[0][0]
            print(f"  {kind:<28} {ms:8.1f} ms  ({ms / base:6.1f}x count(*)) {n:7,} rows"
                  f"{'  OVER TARGET' if targets and ms > target else ''}", flush=True)
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
    ap.add_argument("--spans", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--scale-db", type=Path, default=None,
                    help="a scale-16k run store (rolloutscope scenario run scale-16k --db ...)")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--views", type=Path, default=None)
    args = ap.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="rs-bench-incidents-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    scale = args.scale_db
    if scale is None:
        scale = data_dir / "scale16k-synthetic.duckdb"
        if not scale.exists():
            generate(scale, spans=16_000 * 11)  # 16k prompts' worth of spans
    print(f"views: {args.views or 'packaged'}; load {os.getloadavg()[0]:.2f}")
    at16k = measure(scale, f"16k-rollout run ({scale.name})", args.repeats, args.views,
                    targets=True)
    sizes = sorted(args.spans)
    by_size = {n: measure(_synthetic(data_dir, n), f"{n:,}-span run", args.repeats, args.views,
                          targets=n >= 10_000_000) for n in sizes}
    print(f"\ngrowth (ms at each size, and the factor from one size to the next for "
          f"{'x'.join(str(b // a) for a, b in zip(sizes, sizes[1:])) or 'no'} more spans):")
    for kind in (*INCIDENT_KINDS, "incidents"):
        ms = [by_size[n][kind] for n in sizes]
        growth = "  ".join(f"x{b / a:5.1f}" for a, b in zip(ms, ms[1:]))
        print(f"  {kind:<28} " + "  ".join(f"{m:8.1f}" for m in ms) + f"   {growth}")
    ok = all(v <= 500 for k, v in at16k.items() if k != "incidents") \
        and at16k["incidents"] <= 1000
    print(f"\nRESULT 16k run: {'targets met' if ok else 'targets NOT met'} "
          f"(each view <= 500 ms, incidents <= 1 s); load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
