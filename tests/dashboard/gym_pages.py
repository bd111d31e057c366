"""Driving ``rolloutscope dashboard`` / ``rolloutscope serve`` in Debian's Chromium for runs that
are not rolloutscope's own: a Gym run, an empty store, a store whose spans name no run, OTel's
example payloads, a live collector before its first span.

Each server runs as its own process, so its log can be read for tracebacks. Waits poll the page
with deadlines; nothing sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.child_output import read_line
from tests.dashboard.test_browser import PLOT_PIXELS_JS, TIMEOUT_MS, launched_browser, new_page

playwright_api = pytest.importorskip("playwright.sync_api")
TABS = ("Overview", "Timeline", "Checkpoints", "Fleet", "Rollouts", "Traces", "Incident",
        "Replay")


@contextmanager
def served(cmd: list[str], ready: str, timeout_s: float = 90.0):
    """Run a rolloutscope server command; yield (url, log lines) once it prints ``ready``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.Popen([sys.executable, "-m", "rolloutscope", *cmd],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    url = None
    while url is None:
        line = read_line(proc.stdout, deadline)
        if not line:  # the deadline passed, or it exited
            proc.kill()
            raise RuntimeError(f"{cmd[0]} did not start: {''.join(lines)}")
        lines.append(line)
        if ready in line:
            url = line.split(ready, 1)[1].split()[0]
    reader = _Reader(proc, lines)
    try:
        yield url, reader
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        reader.drain()


class _Reader:
    """The server's output so far (read without blocking) and at the end."""

    def __init__(self, proc: subprocess.Popen, lines: list[str]) -> None:
        self.proc, self.lines = proc, lines
        os.set_blocking(proc.stdout.fileno(), False)

    def drain(self) -> str:
        try:
            rest = self.proc.stdout.read()
        except (OSError, ValueError):
            rest = None
        if rest:
            self.lines.append(rest)
        return "".join(self.lines)

    def text(self) -> str:
        return self.drain()


@contextmanager
def browser_page():
    with launched_browser() as browser:
        ctx, page = new_page(browser)
        try:
            yield page
        finally:
            ctx.close()


def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_function("() => window.Bokeh && window.Bokeh.documents.length > 0")


def open_tab(page, name: str) -> None:
    page.locator(".bk-tab", has_text=name).first.click()


def plots_drawn(page, count: int, drawn: int | None = None) -> list:
    """Wait until ``count`` plots are on screen and the first ``drawn`` of them (default: all)
    drew; their [top, left, height, coloured pixels], top first."""
    page.wait_for_function(
        f"([n, d]) => {{ const p = ({PLOT_PIXELS_JS})(); "
        "return p.length >= n && p.slice(0, d).every((x) => x[3] > 200); }",
        arg=[count, count if drawn is None else drawn], timeout=TIMEOUT_MS)
    return page.evaluate(PLOT_PIXELS_JS)


def slow_browser(page, rate: float = 20) -> None:
    """Run the page's scripts ``rate`` times slower (Chromium's CPU throttling), as a busy or
    small machine's browser does: what reaches a widget while it is still being built shows."""
    page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": rate})


def text_shown(page, text: str) -> None:
    page.get_by_text(text).first.wait_for()


def click_settled(page, locator, still_s: float = 0.5) -> None:
    """Click ``locator`` once its box has held still for ``still_s``. Playwright checks two
    animation frames; a busy browser can re-lay a table out later than that (after a
    full-page screenshot, or as a pane above it fills in) and move another row under the
    click."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    box, since = None, time.monotonic()
    while box is None or time.monotonic() - since < still_s:
        assert time.monotonic() < deadline, f"{locator} never held still (last at {box})"
        page.wait_for_timeout(50)
        now = locator.bounding_box()
        if now != box:
            box, since = now, time.monotonic()
    locator.click()


def shown_after_click(page, text: str, what: str) -> None:
    """``text_shown``, failing with what the page shows instead: the tab it is on and the
    entries its pickers hold (a click that landed elsewhere opens another trace)."""
    try:
        text_shown(page, text)
    except playwright_api.TimeoutError:
        tab = page.locator(".bk-tab.bk-active").first.inner_text()
        picked = page.locator("select").evaluate_all(
            "ss => ss.map((s) => s.options[s.selectedIndex]?.text)")
        raise AssertionError(f"{what}: {text!r} not shown; tab {tab!r}, pickers {picked}"
                             ) from None


def no_traceback(log: str) -> None:
    assert "Traceback" not in log and "KeyError" not in log, log[-4000:]


def check_every_tab(db: Path, shots: Path, *, rollout: str) -> None:
    """Every tab of a Gym run's dashboard drawn, the trace of ``rollout`` drawn as a waterfall,
    no console error, no traceback in the server's log; a screenshot of each tab."""
    with served(["dashboard", str(db), "--port", "0", "--no-browser"], "dashboard: ") as (
            url, log), browser_page() as page:
        open_page(page, url)
        text_shown(page, "Gym rollouts finished")
        text_shown(page, "What this run holds")
        page.screenshot(path=str(shots / "overview.png"), full_page=True)
        open_tab(page, "Timeline")
        # the lanes and the rollout gauges; no shard and no serving sample: no serving plot
        drawn = plots_drawn(page, 2)
        assert len(drawn) == 2, drawn
        text_shown(page, "showing 5 of 5 rollouts (all)")
        page.screenshot(path=str(shots / "timeline.png"), full_page=True)
        open_tab(page, "Checkpoints")
        text_shown(page, "No checkpoint telemetry in this run")
        page.screenshot(path=str(shots / "checkpoints.png"), full_page=True)
        open_tab(page, "Fleet")
        text_shown(page, "No generation-fleet health telemetry in this run")
        page.locator(".tabulator-cell", has_text="policy_model").first.wait_for()
        page.screenshot(path=str(shots / "fleet.png"), full_page=True)
        open_tab(page, "Rollouts")
        page.locator(".tabulator-cell", has_text=rollout).first.wait_for()
        page.locator(".tabulator-cell", has_text="gym.model.responses").first.wait_for()
        page.locator(".tabulator-cell", has_text="gym.rollout.duration_ms").first.wait_for()
        page.screenshot(path=str(shots / "rollouts.png"), full_page=True)
        # picking a Gym rollout opens its trace
        click_settled(page, page.locator(".tabulator-row", has_text=rollout).first)
        shown_after_click(page, "55 spans; red = failed", f"picking {rollout}")
        picked = page.locator("select").first.evaluate("s => s.options[s.selectedIndex].text")
        assert f"rollout {rollout} (finished" in picked
        drawn = plots_drawn(page, 1)
        assert drawn[0][2] > 55 * 15  # a row for each of the rollout's 55 spans
        page.locator(".tabulator-cell", has_text="nemo.gym.rollout.id").first.wait_for()
        page.screenshot(path=str(shots / "traces.png"), full_page=True)
        open_tab(page, "Incident")
        text_shown(page, "No incident in this run yet")
        page.screenshot(path=str(shots / "incident.png"), full_page=True)
        open_tab(page, "Replay")
        text_shown(page, "No replay to compare with: this file holds one run")
        page.screenshot(path=str(shots / "replay.png"), full_page=True)
        assert page.errors == []
    no_traceback(log.text())
