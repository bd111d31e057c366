"""First render of every dashboard view on a synthetic run, against a baseline in the same run.

    .venv/bin/python benchmarks/bench_render.py [--spans 10000000] [--reps 5] [--db RUN.duckdb]

Writes a synthetic run (benchmarks/synthetic.py: ~11 spans per prompt, so 10M spans are ~900k
prompts with their tries, deadlines, parked intervals and completions) unless ``--db`` names
one, loads it into two DataStores, then times the first render of each view
(``pn.panel(view).get_root()``: every plot built and its Bokeh models made) in a fresh session
of views, ``--reps`` times each, alternating the two:

- baseline: the view rows read through DuckDB's ``df()``, which makes a Python string of every
  text value (``DataStore.arrow_text = False``), so the selections a first render derives
  (the rollout lanes, the rollouts the incidents name, the lane frames) scan Python objects;
- now: read through ``RunStore.query_frame``, text kept as Arrow strings.

Each render starts from a collected heap (``gc.collect()`` first, untimed), as a new session's
does. Prints the median of each, their ratio, the target (0.4 s per view), the spread of the
renders now and the machine's load before and after: read ratios on a busy machine, not
absolutes.

With ``--load-reps N`` it first times the DataStore load itself N times each way (after one
warm-up load, in turns, the order alternating): baseline, the view rows read through DuckDB's
``df()``, which makes a Python string of every text value (``DataStore.arrow_text = False``);
now, through ``RunStore.query_frame``, which keeps text as Arrow strings.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import panel as pn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import generate  # noqa: E402

from rolloutscope.dashboard.app import (  # noqa: E402
    Checkpoints,
    Fleet,
    IncidentDetail,
    Overview,
    Rollouts,
    Timeline,
)
from rolloutscope.dashboard.datastore import DataStore  # noqa: E402
from rolloutscope.store import RunStore  # noqa: E402

VIEW_CLASSES = {"overview": Overview, "timeline": Timeline, "checkpoints": Checkpoints,
                "fleet": Fleet, "rollouts": Rollouts, "incident": IncidentDetail}
VIEWS = tuple(VIEW_CLASSES)
TARGET_MS = 400.0


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def render_ms(data: DataStore, name: str) -> float:
    data._derived.clear()  # a new session's first render derives everything anew
    view = VIEW_CLASSES[name](data)  # the one view: a whole Dashboard builds every tab
    # collected first: a render is not charged for the garbage of the renders timed before it
    # (a full collection of it took 150-200 ms, about one render in six)
    gc.collect()
    t = time.perf_counter()
    pn.panel(view).get_root()
    return (time.perf_counter() - t) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--db", type=Path, help="an existing run file instead of a synthetic one")
    ap.add_argument("--views", nargs="+", choices=VIEWS, default=list(VIEWS),
                    help="the views to time (default: all)")
    ap.add_argument("--load-reps", type=int, default=0,
                    help="time the DataStore load this many times each way first")
    args = ap.parse_args(argv)
    print(f"before: {load()}")
    tmp = Path(tempfile.mkdtemp(prefix="rolloutscope-bench-render-"))
    try:
        db = args.db
        if db is None:
            db = tmp / "synthetic.duckdb"
            t = time.perf_counter()
            counts = generate(db, spans=args.spans)
            print(f"synthesised {counts['spans']:,} spans in {time.perf_counter() - t:,.1f} s")
        with RunStore(db, read_only=True) as store:
            run_id = store.run_ids()[-1]
            if args.load_reps:
                base, now = [], []
                read_ms: dict[bool, dict[str, float]] = {}  # the last load's reads, each way
                DataStore(store, run_id=run_id)  # warm: the first read of a file is cold
                for rep in range(args.load_reps):
                    order = ((False, base), (True, now))
                    for arrow, out in order if rep % 2 == 0 else order[::-1]:
                        DataStore.arrow_text = arrow
                        t = time.perf_counter()
                        data = DataStore(store, run_id=run_id)
                        out.append(time.perf_counter() - t)
                        read_ms[arrow] = dict(data.last_refresh_by_view)
                DataStore.arrow_text = True
                b, n = statistics.median(base), statistics.median(now)
                slowest = sorted(read_ms[False], key=read_ms[False].get, reverse=True)[:5]
                print(f"DataStore load, median of {args.load_reps}: baseline (text as Python "
                      f"strings) {b:,.1f} s, now (text as Arrow strings) {n:,.1f} s, "
                      f"now/baseline {n / b:.2f}  ({', '.join(f'{x:.1f}' for x in base)} / "
                      f"{', '.join(f'{x:.1f}' for x in now)}); slowest reads, ms: "
                      + ", ".join(f"{k} {read_ms[False][k]:,.0f} -> {read_ms[True][k]:,.0f}"
                                  for k in slowest), flush=True)
            loaded = {}
            for arrow in (False, True):
                DataStore.arrow_text = arrow
                t = time.perf_counter()
                loaded[arrow] = DataStore(store, run_id=run_id)
                took = time.perf_counter() - t
            DataStore.arrow_text = True
            data = loaded[True]
            rows = {k: len(v) for k, v in data.frames.items() if len(v)}
            print(f"run {run_id}: DataStore load {took:,.1f} s; rows "
                  + ", ".join(f"{k} {v:,}" for k, v in rows.items()))
            for name in VIEWS:  # warm the process: imports, Bokeh's first models
                render_ms(data, name)
            print(f"{'view':<12} {'baseline ms':>12} {'now ms':>8} {'now/baseline':>13}  "
                  f"target {TARGET_MS:.0f} ms (median of {args.reps})")
            for name in args.views:
                base, now = [], []
                for _ in range(args.reps):
                    base.append(render_ms(loaded[False], name))
                    now.append(render_ms(loaded[True], name))
                b, n = statistics.median(base), statistics.median(now)
                flag = "ok" if n <= TARGET_MS else "OVER"
                print(f"{name:<12} {b:>12,.0f} {n:>8,.0f} {n / b:>13.2f}  {flag}  "
                      f"(now {min(now):,.0f}-{max(now):,.0f})", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
