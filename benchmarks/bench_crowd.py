"""A crowd on one dashboard server: twenty browser sessions at once, then a burst of page loads
from clients that give up after 2 s, on ``rolloutscope dashboard RUN`` as a user starts it.

One server (the CLI, default limits: ``--memory-mib`` 4096, ``--max-sessions`` 20, or what is
given), then, ``--reps`` times:

- ``--sessions`` Chromium pages (one context each, one browser) asked for the page at once;
  each one's time from the request to the Overview drawn (its indicators and a row of its
  incident table), and the server's peak and settled resident memory while they are open;
- with those closed, ``--burst`` page loads at once by plain HTTP clients with a 2 s timeout
  (a client retrying a slow page): whether the server is still up, its peak memory against its
  bound, how many loads it answered with the page and how many with the busy page, and the
  time until a browser gets a drawn Overview again.

The baseline, in the same run: one session alone on a fresh server (the first one's open time
and memory), so the ratios say what a crowd adds.

    python benchmarks/bench_crowd.py RUN.duckdb [--sessions 20] [--burst 30] [--reps 3]

Quote the load it prints with the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_sessions import CHROMIUM, FLAGS, rss_mib, settled_rss  # noqa: E402

READY = "dashboard: "
DRAWN = "rollouts committed"
BUSY = "the dashboard is busy"


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


class Server:
    """``rolloutscope dashboard RUN`` in a child process, its output read as it comes."""

    def __init__(self, run: str, args: list[str]) -> None:
        exe = Path(sys.executable).with_name("rolloutscope")
        self.proc = subprocess.Popen([str(exe), "dashboard", run, "--port", "0", "--no-browser",
                                      *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.url = None
        started = time.monotonic()
        while self.url is None:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the server did not start:\n" + "".join(self.lines))
            self.lines.append(line)
            if READY in line:
                self.url = line.split(READY, 1)[1].strip().split()[0]
        self.start_s = time.monotonic() - started
        threading.Thread(target=self._drain, daemon=True).start()
        self.peak = 0.0
        self._watching = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def _watch(self) -> None:
        while self.proc.poll() is None:
            self.peak = max(self.peak, rss_mib(self.proc.pid))
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def open_at_once(browser, url: str, n: int, timeout_s: float = 300.0
                 ) -> tuple[list[float | None], list]:
    """``n`` pages asked for at once: each one's seconds until its Overview is drawn (None: the
    busy page, or not drawn within the timeout), and the (context, page) pairs, still open."""
    pages, t0 = [], time.perf_counter()
    for _ in range(n):
        ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
        page = ctx.new_page()
        page.goto(url, wait_until="commit")
        pages.append((ctx, page))
    done: dict[int, float | None] = {}
    deadline = time.monotonic() + timeout_s
    while len(done) < n and time.monotonic() < deadline:
        for i, (_, page) in enumerate(pages):
            if i in done:
                continue
            if page.get_by_text(BUSY).count():
                done[i] = None
            elif page.get_by_text(DRAWN).count() and page.locator(".tabulator-row").count():
                done[i] = time.perf_counter() - t0
        pages[0][1].wait_for_timeout(100)
    return [done.get(i) for i in range(n)], pages


def burst(url: str, n: int) -> dict:
    """``n`` plain page loads at once, each giving up after 2 s."""
    answers = {"page": 0, "busy": 0, "timed out": 0, "error": 0}
    lock = threading.Lock()

    def one() -> None:
        try:
            body = urllib.request.urlopen(url, timeout=2).read().decode(errors="replace")
            what = "busy" if BUSY in body else "page"
        except TimeoutError:
            what = "timed out"
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            what = "timed out" if "timed out" in str(exc) else "error"
        with lock:
            answers[what] += 1

    clients = [threading.Thread(target=one) for _ in range(n)]
    for c in clients:
        c.start()
    for c in clients:
        c.join(60)
    return answers


def first_drawn_after(browser, url: str, timeout_s: float = 300.0) -> float | None:
    """Seconds until a browser gets a drawn Overview (retrying the busy page every 2 s)."""
    t0 = time.perf_counter()
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = ctx.new_page()
    page.set_default_timeout(int(timeout_s * 1000))
    try:
        while time.perf_counter() - t0 < timeout_s:
            page.goto(url)
            page.get_by_text(DRAWN).or_(page.get_by_text(BUSY)).first.wait_for()
            if page.get_by_text(DRAWN).count():
                page.locator(".tabulator-row").first.wait_for()
                return time.perf_counter() - t0
            page.wait_for_timeout(2000)
        return None
    finally:
        ctx.close()


def med(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--burst", type=int, default=30)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--memory-mib", type=int, default=4096)
    ap.add_argument("--max-sessions", type=int, default=20)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    limits = ["--memory-mib", str(args.memory_mib), "--max-sessions", str(args.max_sessions)]
    print(f"run {args.run}; server bound {args.memory_mib} MiB, {args.max_sessions} sessions; "
          f"{os.cpu_count()} cores, {load()}")
    alone, crowd, crowd_peak, crowd_settled, base_rss = [], [], [], [], []
    bursts = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        for rep in range(args.reps):
            server = Server(args.run, limits)
            try:
                base = settled_rss(server.proc.pid)
                alone.append(first_drawn_after(browser, server.url))
                one_rss = settled_rss(server.proc.pid)
                base_rss.append(one_rss)
                server.peak = 0.0
                times, pages = open_at_once(browser, server.url, args.sessions)
                drawn = [t for t in times if t is not None]
                crowd.append(max(drawn) if len(drawn) == len(times) else float("nan"))
                settled = settled_rss(server.proc.pid)
                crowd_peak.append(server.peak)
                crowd_settled.append(settled)
                print(f"rep {rep + 1}: server {base:.0f} MiB idle, {one_rss:.0f} MiB after one "
                      f"session (drawn in {alone[-1]:.2f} s); {args.sessions} at once: "
                      f"{len(drawn)} drawn, {sum(t is None for t in times)} busy or not drawn, "
                      f"slowest {crowd[-1]:.2f} s, median {med(times):.2f} s; server peak "
                      f"{server.peak:.0f} MiB, settled {settled:.0f} MiB; {load()}")
                for ctx, _ in pages:
                    ctx.close()
                server.peak = 0.0
                answers = burst(server.url, args.burst)
                back = first_drawn_after(browser, server.url)
                bursts.append((server.alive(), server.peak, answers, back))
                print(f"rep {rep + 1}: burst of {args.burst} 2 s page loads: {answers}; server "
                      f"{'up' if server.alive() else 'DOWN'}, peak {server.peak:.0f} MiB "
                      f"(bound {args.memory_mib}); a browser drawn again after "
                      f"{back if back is None else round(back, 2)} s; {load()}")
            finally:
                server.stop()
        browser.close()
    print()
    print(f"one session alone: opened in {med(alone):.2f} s, server {med(base_rss):.0f} MiB")
    print(f"{args.sessions} sessions at once: all drawn within {med(crowd):.2f} s (median of "
          f"{args.reps} slowest), server peak {med(crowd_peak):.0f} MiB, settled "
          f"{med(crowd_settled):.0f} MiB; ratio slowest/alone {med(crowd) / med(alone):.2f}, "
          f"memory {med(crowd_settled) / med(base_rss):.2f}x one session's")
    up = all(b[0] for b in bursts)
    print(f"burst of {args.burst}: server up in {sum(b[0] for b in bursts)}/{len(bursts)}, "
          f"peak {med([b[1] for b in bursts]):.0f} MiB against a {args.memory_mib} MiB bound, "
          f"a browser drawn again after {med([b[3] for b in bursts]):.2f} s")
    print(load())
    return 0 if up else 1


if __name__ == "__main__":
    sys.exit(main())
