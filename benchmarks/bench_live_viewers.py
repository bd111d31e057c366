"""Ingest with live viewers: what browser sessions on ``rolloutscope serve``'s live dashboard
cost the collector's senders.

One ``rolloutscope serve --dashboard-port 0`` (the dashboard in its own process, reading
through the query endpoint). Each repeat sends ``--batches`` 1,000-span OTLP/HTTP requests
(bench_collector.py's senders and bodies) twice, alternating: with no page open, then with
``--viewers`` Chromium pages open on the live dashboard (each ticking every 1.5 s). For each:
spans/s, ack latency p50/p99 (the time a sender waits for each request's answer), and for the
viewers their tick (the page's own "last refresh N ms"). Medians of ``--repeats``. Prints the
ratio p99 with viewers / p99 without (target: within 1.5x), the collector's and the dashboard
process's resident memory, and the machine's load.

``--db RUN.duckdb --run-id RUN --rate 20000``: the collector serves an existing store (it
writes into it: give a copy) and the senders add to that run from its last instant on, paced
at that many spans/s in all: the live dashboard of a large run while it grows.

Run:  .venv/bin/python benchmarks/bench_live_viewers.py [--viewers 3] [--batches 600]
      .venv/bin/python benchmarks/bench_live_viewers.py --db COPY.duckdb --run-id synthetic \
          --rate 20000 --batches 300
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_collector import SPANS_PER_BATCH, drive  # noqa: E402

READY = "rolloutscope collector ready "
DASHBOARD_READY = "rolloutscope dashboard ready "
TICK = re.compile(r"last refresh ([\d,]+) ms")


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def head_ns(db: str, run_id: str) -> int:
    """The run's last instant in the store (where the senders go on from)."""
    from rolloutscope.store import RunStore

    with RunStore(db, read_only=True) as store:
        rows = store.query("SELECT last_seen_ns FROM runs WHERE run_id = ?", [run_id])
    if not rows or rows[0][0] is None:
        raise SystemExit(f"{db} has no run {run_id!r}")
    return int(rows[0][0]) + 10**9


def start_serve(db: Path) -> tuple[subprocess.Popen, int, str]:
    proc = subprocess.Popen([sys.executable, "-m", "rolloutscope", "serve", "--db", str(db),
                             "--otlp-http-port", "0", "--otlp-grpc-port", "0",
                             "--dashboard-port", "0"],
                            stdout=subprocess.PIPE, text=True)
    port, url = None, None
    while url is None:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("serve exited before it was ready")
        if line.startswith(READY):
            port = int(re.search(r"http=http://127\.0\.0\.1:(\d+)", line).group(1))
        elif line.startswith(DASHBOARD_READY):
            url = line[len(DASHBOARD_READY):].strip()
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, port, url


class Viewers:
    """``n`` Chromium pages on the live dashboard, reading their own tick time."""

    def __init__(self, url: str, n: int) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path="/usr/bin/chromium")
        self.pages = []
        for _ in range(n):
            page = self._browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url, timeout=180_000)
            page.wait_for_selector("text=last refresh", timeout=180_000)
            self.pages.append(page)

    def ticks_ms(self) -> list[float]:
        out = []
        for page in self.pages:
            # the header is in a widget's shadow root: a text locator pierces it
            found = page.get_by_text(TICK)
            m = TICK.search(found.first.inner_text()) if found.count() else None
            if m:
                out.append(float(m.group(1).replace(",", "")))
        return out

    def close(self) -> None:
        self._browser.close()
        self._pw.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--viewers", type=int, default=3)
    ap.add_argument("--batches", type=int, default=600, help="1,000-span requests per phase")
    ap.add_argument("--senders", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--db", default=None, help="serve this store (written into: a copy)")
    ap.add_argument("--run-id", default="bench", help="the run the senders add to")
    ap.add_argument("--rate", type=float, default=0.0, help="spans/s in all (0: unpaced)")
    args = ap.parse_args()
    print(f"{load()} at start; {args.viewers} viewers, {args.senders} sender(s) x "
          f"{args.batches} x {SPANS_PER_BATCH:,} spans per phase, {args.repeats} repeats",
          flush=True)
    t0 = head_ns(args.db, args.run_id) if args.db else None
    sent = {"run_id": args.run_id, "rate": args.rate}
    with tempfile.TemporaryDirectory() as tmp:
        proc, port, url = start_serve(Path(args.db) if args.db else Path(tmp) / "run.duckdb")
        try:
            (dash,) = children(proc.pid)
            rows = {"no viewer": [], "viewers": []}
            ticks: list[float] = []
            for rep in range(args.repeats):
                if t0 is not None:  # each phase from the head the last one left
                    sent["t0"] = t0 + (2 * rep) * args.batches * 10**9
                rows["no viewer"].append(drive(port, proc.pid, args.senders, args.batches,
                                               **sent))
                viewers = Viewers(url, args.viewers)
                # the pages are read from this thread only (playwright's sync API)
                result: dict = {}
                if t0 is not None:
                    sent["t0"] = t0 + (2 * rep + 1) * args.batches * 10**9
                sender = threading.Thread(target=lambda: result.update(
                    drive(port, proc.pid, args.senders, args.batches, **sent)))
                sender.start()
                while sender.is_alive():
                    ticks.extend(viewers.ticks_ms())
                    time.sleep(1.5)
                sender.join()
                ticks.extend(viewers.ticks_ms())
                rows["viewers"].append(result)
                mem = (rss_mib(proc.pid), rss_mib(dash))
                viewers.close()
                print(f"repeat {rep + 1}: p99 {rows['no viewer'][-1]['p99_ms']:.0f} ms without, "
                      f"{result['p99_ms']:.0f} ms with viewers; collector {mem[0]:.0f} MiB, "
                      f"dashboard {mem[1]:.0f} MiB; {load()}", flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
    print()
    print("| phase | spans/s | ack p50 ms | ack p99 ms |")
    print("|---|---|---|---|")
    med = {}
    for name, rs in rows.items():
        med[name] = {k: statistics.median(r[k] for r in rs)
                     for k in ("spans_per_s", "p50_ms", "p99_ms")}
        m = med[name]
        print(f"| {name} | {m['spans_per_s']:,.0f} | {m['p50_ms']:.0f} | {m['p99_ms']:.0f} |")
    ratio = med["viewers"]["p99_ms"] / med["no viewer"]["p99_ms"]
    tick = statistics.median(ticks) if ticks else float("nan")
    print(f"\nack p99 with {args.viewers} viewers / without: {ratio:.2f}x (target <= 1.5x); "
          f"live tick median {tick:.0f} ms over {len(ticks)} readings; {load()} at end")


if __name__ == "__main__":
    main()
