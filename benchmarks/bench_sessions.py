"""Dashboard sessions on one server: memory per session and open time, shared reads vs each
session reading for itself.

Serves ``rolloutscope dashboard``'s server (``serve_dashboard``) over a run in a child process,
once with the sessions sharing the server's reads (``dashboard.shared``) and making a tab's
view when it is first shown (``app.LAZY_TABS``), today's path, and once with every session
reading and deriving the whole run for itself and making every tab's view at once
(``DataStore.share_reads = False``, ``app.LAZY_TABS = False``, the path before), and opens ``--sessions`` browser sessions one after another in
Chromium, each kept open. For each session: the time from the page request to the Overview's
first render (its indicators and incident table shown), and the server's resident memory
(``/proc/PID/status`` VmRSS) once that session is drawn. The two modes alternate, ``--reps``
times each, in this one run; medians are printed.

    python benchmarks/bench_sessions.py RUN.duckdb --sessions 3 --reps 3
    python benchmarks/bench_sessions.py --spans 3000000 --sessions 3 --reps 3

(``--spans`` writes a synthetic run with ``benchmarks/synthetic.py`` into a temporary
directory first.) Quote ``uptime``'s load with the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READY = "bench-sessions ready "
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MiB = 1024 * 1024


def serve(run: str, old: bool, memory_mib: int) -> None:
    """The child: the CLI's server over ``run``, old path or new."""
    from rolloutscope.dashboard import app
    from rolloutscope.dashboard.app import serve_dashboard
    from rolloutscope.dashboard.datastore import DataStore
    from rolloutscope.dashboard.shared import DashboardLimits
    from rolloutscope.store import RunStore

    DataStore.share_reads = not old
    app.LAZY_TABS = not old
    with RunStore(run, read_only=True) as store:
        serve_dashboard(store, port=0, live=False, show=False,
                        limits=DashboardLimits(memory_mib=memory_mib, max_sessions=100),
                        on_ready=lambda url: print(f"{READY}{url}", flush=True))


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def settled_rss(pid: int, still_s: float = 1.0, timeout_s: float = 20.0) -> float:
    """The server's RSS once it stopped moving by more than 2 MiB for ``still_s``."""
    deadline = time.monotonic() + timeout_s
    last, since = rss_mib(pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = rss_mib(pid)
        if abs(now - last) > 2:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= still_s:
            break
    return rss_mib(pid)


def one_server(run: str, old: bool, sessions: int, memory_mib: int, browser) -> dict:
    return open_sessions([sys.executable, __file__, "--serve", run, "--memory-mib",
                          str(memory_mib), *(["--old"] if old else [])], sessions, browser)


def open_sessions(cmd: list[str], sessions: int, browser) -> dict:
    """Start the server ``cmd`` (it prints READY and its URL), open ``sessions`` pages in
    Chromium one after another, each until the Overview has drawn: each page's open time and
    the server's settled RSS before and after each."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        while url is None:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("the server did not start")
            if READY in line:
                url = line.split(READY, 1)[1].strip()
        rss = [settled_rss(proc.pid)]
        opens, contexts = [], []
        for _ in range(sessions):
            ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
            contexts.append(ctx)
            page = ctx.new_page()
            page.set_default_timeout(300_000)
            t = time.perf_counter()
            page.goto(url)
            page.get_by_text("rollouts committed").first.wait_for()
            page.locator(".tabulator-row").first.wait_for()
            opens.append(time.perf_counter() - t)
            rss.append(settled_rss(proc.pid))
        for ctx in contexts:
            ctx.close()
        return {"open_s": opens, "rss_mib": rss}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", help="a run store (or give --spans)")
    ap.add_argument("--spans", type=int, default=None, help="write a synthetic run this size")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--memory-mib", type=int, default=8192,
                    help="the served dashboard's memory bound (high: this measures, it does "
                         "not refuse)")
    ap.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--old", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.old, args.memory_mib)
        return 0
    from playwright.sync_api import sync_playwright

    tmp = None
    run = args.run
    if run is None:
        if args.spans is None:
            ap.error("give a run store or --spans")
        sys.path.insert(0, str(Path(__file__).parent))
        import synthetic

        tmp = tempfile.mkdtemp(prefix="bench-sessions-")
        run = str(Path(tmp) / "run.duckdb")
        synthetic.generate(run, spans=args.spans)
    print(f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; {args.sessions} sessions, "
          f"{args.reps} reps each mode, {run}", flush=True)
    results: dict[str, list[dict]] = {"shared": [], "old": []}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            try:
                for rep in range(args.reps):
                    for mode in ("old", "shared"):
                        r = one_server(run, mode == "old", args.sessions, args.memory_mib,
                                       browser)
                        results[mode].append(r)
                        print(f"rep {rep} {mode:6}: open "
                              f"{', '.join(f'{s:.1f}' for s in r['open_s'])} s; RSS "
                              f"{' -> '.join(f'{m:.0f}' for m in r['rss_mib'])} MiB",
                              flush=True)
            finally:
                browser.close()
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at the end")
    for mode, runs in results.items():
        first = statistics.median(r["open_s"][0] for r in runs)
        later = statistics.median(s for r in runs for s in r["open_s"][1:])
        first_mib = statistics.median(r["rss_mib"][1] - r["rss_mib"][0] for r in runs)
        per = statistics.median((r["rss_mib"][-1] - r["rss_mib"][1]) / (len(r["rss_mib"]) - 2)
                                for r in runs)
        print(f"{mode:6}: first session {first:5.1f} s, +{first_mib:5.0f} MiB; each further "
              f"session {later:5.1f} s, +{per:5.0f} MiB (medians of {len(runs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
