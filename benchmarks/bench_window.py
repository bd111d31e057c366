"""Window mode (docs/dashboard.md#window-mode) against reading the whole run: session open time
and memory per session on one dashboard server, and the time to bring every tab onto one
incident.

Two parts, each mode in turn, ``--reps`` times, medians printed:

- headless, in this process: a session's ``DataStore`` opened on a fresh server (nothing shared
  yet: the first session's cost), a second one beside it (what each later session costs), and
  two incidents picked (``DataStore.incident``: the time range, in window mode the window, moves
  onto it and its rows are read): the oldest that ended, then the oldest still open (its
  stretch runs to the head, so the window is cut to its most, 120 minutes);
- served (``serve_dashboard`` in a child process, as ``rolloutscope dashboard`` serves it),
  ``--sessions`` Chromium sessions opened one after another and kept open: the time from the
  page request to the Overview drawn (its indicators and incident table), and the server's
  resident memory once each is drawn.

Window mode is the default for a run over ``DEFAULT_WINDOW_SPANS`` spans; "whole" sets the
threshold above the run. ``--threads`` is DuckDB's threads for the store (DuckDB 1.5.5 did not
finish reading ``rollout_attempts`` of a synthetic run with 2 threads on a 2-core machine: the
default there).

    python benchmarks/bench_window.py --spans 2000000 --reps 3 --sessions 3
    python benchmarks/bench_window.py RUN.duckdb
    python benchmarks/bench_window.py B100M.duckdb --no-browser --modes window

Quote the load it prints with the figures.
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

sys.path.insert(0, str(Path(__file__).parent))
from bench_sessions import CHROMIUM, FLAGS, READY, open_sessions  # noqa: E402

WHOLE_SPANS = 10**12  # a threshold no run reaches: the whole run read, as before window mode


def limits(mode: str, memory_mib: int):
    from rolloutscope.dashboard.shared import DashboardLimits

    return DashboardLimits(memory_mib=memory_mib, max_sessions=100,
                           **({"window_spans": WHOLE_SPANS} if mode == "whole" else {}))


def serve(run: str, mode: str, memory_mib: int, threads: int) -> None:
    """The child: the CLI's server over ``run``."""
    from rolloutscope.dashboard.app import serve_dashboard
    from rolloutscope.store import RunStore

    with RunStore(run, read_only=True, threads=threads) as store:
        serve_dashboard(store, port=0, live=False, show=False, limits=limits(mode, memory_mib),
                        on_ready=lambda url: print(f"{READY}{url}", flush=True))


def headless(run: str, mode: str, memory_mib: int, threads: int) -> dict:
    from rolloutscope.dashboard.datastore import DataStore
    from rolloutscope.dashboard.shared import SharedReads
    from rolloutscope.store import RunStore

    with RunStore(run, read_only=True, threads=threads) as store:
        shared = SharedReads(limits(mode, memory_mib))
        t = time.perf_counter()
        first = DataStore(store, shared=shared)
        first_s = time.perf_counter() - t
        t = time.perf_counter()
        DataStore(store, shared=shared)
        second_s = time.perf_counter() - t
        rows = {"on opening": rows_of(first)}
        inc = first.incidents()  # newest first
        # the oldest incident that ended (far from the head the window opens on: its stretch),
        # then the oldest still open (its stretch runs to the head: cut to the window's most)
        picked = {}
        for what, some in (("closed", inc[inc.end_ns.notna()]), ("open", inc[inc.end_ns.isna()])):
            if not len(some):
                continue
            t = time.perf_counter()
            first.incident = str(some.incident_id.iloc[-1])
            picked[what] = time.perf_counter() - t
            rows[what] = rows_of(first)
        return {"first_s": first_s, "second_s": second_s, "picked": picked, "rows": rows,
                "large": first.large}


def rows_of(data) -> int:
    """The rows of the four largest interval frames."""
    return sum(len(data.frames[n]) for n in ("rollout_attempts", "deadlines",
                                             "parked_intervals", "completions"))


def served(run: str, mode: str, sessions: int, memory_mib: int, threads: int,
           browser) -> dict:
    return open_sessions([sys.executable, __file__, "--serve", run, "--mode", mode,
                          "--memory-mib", str(memory_mib), "--threads", str(threads)],
                         sessions, browser)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", help="a run store (or give --spans)")
    ap.add_argument("--spans", type=int, default=None, help="write a synthetic run this size")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=4, help="DuckDB's threads (module doc)")
    ap.add_argument("--memory-mib", type=int, default=8192,
                    help="the dashboard's memory bound (high: this measures, it does not refuse)")
    ap.add_argument("--no-browser", action="store_true", help="the headless part only")
    ap.add_argument("--modes", default="window,whole",
                    help="which modes, comma-separated (window only: a run too large to read "
                         "whole, e.g. 10^8 spans)")
    ap.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="window", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.mode, args.memory_mib, args.threads)
        return 0
    tmp = None
    run = args.run
    if run is None:
        if args.spans is None:
            ap.error("give a run store or --spans")
        import synthetic

        tmp = tempfile.mkdtemp(prefix="bench-window-")
        run = str(Path(tmp) / "run.duckdb")
        synthetic.generate(run, spans=args.spans)
    print(f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; {run}", flush=True)
    modes = tuple(m for m in args.modes.split(",") if m in ("window", "whole"))
    quiet: dict[str, list[dict]] = {m: [] for m in modes}
    pages: dict[str, list[dict]] = {m: [] for m in modes}
    try:
        for rep in range(args.reps):
            for mode in modes:
                r = headless(run, mode, args.memory_mib, args.threads)
                quiet[mode].append(r)
                picks = "; ".join(f"{k} incident picked {v:.2f} s ({r['rows'][k]:,} rows)"
                                  for k, v in r["picked"].items())
                opened = r["rows"]["on opening"]
                print(f"rep {rep} {mode:6} headless (large={r['large']}): first session "
                      f"{r['first_s']:.2f} s ({opened:,} rows of tries, deadlines, parked "
                      f"stays, completions), second {r['second_s']:.2f} s; {picks}", flush=True)
        if not args.no_browser:
            from playwright.sync_api import sync_playwright

            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
                try:
                    for rep in range(args.reps):
                        for mode in modes:
                            r = served(run, mode, args.sessions, args.memory_mib, args.threads,
                                       browser)
                            pages[mode].append(r)
                            print(f"rep {rep} {mode:6} served: open "
                                  f"{', '.join(f'{s:.1f}' for s in r['open_s'])} s; RSS "
                                  f"{' -> '.join(f'{m:.0f}' for m in r['rss_mib'])} MiB",
                                  flush=True)
                finally:
                    browser.close()
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at the end")
    for mode in modes:
        q = quiet[mode]
        med = lambda k: statistics.median(r[k] for r in q)  # noqa: E731
        picks = "".join(
            f", {k} incident picked {statistics.median(r['picked'][k] for r in q):.2f} s"
            for k in q[0]["picked"])
        line = (f"{mode:6}: DataStore first {med('first_s'):.2f} s, second {med('second_s'):.2f}"
                f" s{picks}")
        runs = pages[mode]
        if runs:
            first = statistics.median(r["open_s"][0] for r in runs)
            later = statistics.median(s for r in runs for s in r["open_s"][1:])
            first_mib = statistics.median(r["rss_mib"][1] - r["rss_mib"][0] for r in runs)
            per = statistics.median((r["rss_mib"][-1] - r["rss_mib"][1])
                                    / max(len(r["rss_mib"]) - 2, 1) for r in runs)
            line += (f"; page: first session {first:.1f} s, +{first_mib:.0f} MiB, each further "
                     f"{later:.1f} s, +{per:.0f} MiB")
        print(f"{line} (medians of {len(q)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
