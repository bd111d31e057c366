"""``rolloutscope demo`` end to end in a real Chromium: the live page as a newcomer meets it.

Starts the demo as a subprocess (``--port 0 --no-browser --speed 100``: the 1200 simulated s of
the ``demo`` scenario in about 12 s), reads the dashboard URL and the run file from its output,
and drives Debian's chromium through Playwright. Every wait polls with a deadline; nothing
sleeps. SIGTERM must stop the demo cleanly, after which the run file reopens read-only with the
incidents the page showed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rolloutscope.store import RunStore

from .test_browser import (
    X_RANGES_JS,
    launched_browser,
    new_page,
    open_tab,
    wait_for_every_plot,
)

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60
# quarantine at ~200 simulated s, the deadline fired while parked at ~510 s: 2 and 5 s of wall
# time at 100x, plus a few refresh ticks before the incident views are read again
INCIDENT_TIMEOUT_MS = 45_000
STOP_TIMEOUT_S = 60
# the live run (12 s at 100x) and then three fix replays on the virtual clock
FIX_REPLAYS_TIMEOUT_S = 240


class DemoProcess:
    """The demo subprocess and its output, read line by line on a thread."""

    def __init__(self, db: Path, *, speed: float = 100, extra: tuple[str, ...] = ()) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rolloutscope", "demo", "--port", "0", "--no-browser",
             "--speed", f"{speed:g}", "--db", str(db), *extra],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, pattern: str, timeout_s: float) -> re.Match:
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(re.search(pattern, ln) for ln in self.lines)
                or self.proc.poll() is not None, timeout_s)
            for line in self.lines:
                if m := re.search(pattern, line):
                    return m
        raise AssertionError(f"the demo never printed {pattern!r} (exit {self.proc.poll()}, "
                             f"waited {found and 'until exit' or f'{timeout_s} s'}):\n"
                             + "\n".join(self.lines))


@pytest.fixture
def demo(tmp_path) -> Iterator[DemoProcess]:
    proc = DemoProcess(tmp_path / "demo.duckdb")
    try:
        yield proc
    finally:
        if proc.proc.poll() is None:
            proc.proc.kill()
            proc.proc.wait(10)


def test_the_demo_shows_its_incidents_live_and_stops_cleanly_on_sigterm(demo, tmp_path):
    url = demo.wait_for(r"dashboard at (http://\S+)", START_TIMEOUT_S).group(1)
    run_file = Path(demo.wait_for(r"run file (\S+\.duckdb)", 5).group(1))
    with launched_browser() as browser:
        ctx, page = new_page(browser)
        try:
            page.set_default_timeout(INCIDENT_TIMEOUT_MS)
            page.goto(url)
            page.get_by_text("rollouts committed").wait_for()
            for kind in ("quarantine", "deadline_fired_while_parked"):
                page.locator(".tabulator-cell", has_text=kind).first.wait_for()
            page.screenshot(path=str(tmp_path / "demo_overview.png"), full_page=True)

            open_tab(page, "Timeline")
            wait_for_every_plot(page, 2)
            before = page.evaluate(X_RANGES_JS)
            page.screenshot(path=str(tmp_path / "demo_timeline.png"), full_page=True)
            open_tab(page, "Overview")
            page.locator(".tabulator-row", has_text="deadline_fired_while_parked").first.click()
            page.wait_for_function(f"(b) => ({X_RANGES_JS})() !== b", arg=before)
            wait_for_every_plot(page, 2)
            page.screenshot(path=str(tmp_path / "demo_timeline_incident.png"), full_page=True)

            open_tab(page, "Fleet")
            wait_for_every_plot(page, 3)
            page.screenshot(path=str(tmp_path / "demo_fleet.png"), full_page=True)
            open_tab(page, "Incident")
            page.get_by_text("Step by step").wait_for()
            page.screenshot(path=str(tmp_path / "demo_incident.png"), full_page=True)

            # the demo ends by replaying its incidents with their fixes into the live file;
            # the open page's Replay tab picks them up: before/after, verdicts, outcome counts
            demo.wait_for(r"fix replays written", FIX_REPLAYS_TIMEOUT_S)
            open_tab(page, "Replay")
            page.get_by_text("rollout lanes").first.wait_for()
            page.locator(".tabulator-cell", has_text="vanished").first.wait_for()
            page.locator(".tabulator-cell", has_text="deadline_fired_while_parked").first \
                .wait_for()
            page.locator(".tabulator-cell", has_text="committed").first.wait_for()
            wait_for_every_plot(page, 2)  # before and after
            page.screenshot(path=str(tmp_path / "demo_replay.png"), full_page=True)
            assert page.errors == []
        finally:
            ctx.close()

    demo.proc.send_signal(signal.SIGTERM)
    assert demo.proc.wait(STOP_TIMEOUT_S) == 0, "\n".join(demo.lines)
    with RunStore(run_file, read_only=True) as store:
        kinds = {k for (k,) in store.query("SELECT DISTINCT kind FROM incidents")}
    assert {"quarantine", "deadline_fired_while_parked"} <= kinds
