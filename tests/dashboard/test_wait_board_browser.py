"""The In flight tab in a real Chromium over ``rolloutscope demo`` live: the board's rows appear,
their ages count up, and the board keeps its order from tick to tick while rollouts finish and
new ones start; the staleness lane and the lag distribution draw.

The demo runs as a subprocess at 10x (its 1200 simulated s in about two minutes, rollouts of 40
to 200 simulated s finishing every few seconds of wall time), without its fix replays. Waits
poll the page with deadlines; nothing sleeps. Screenshots land in the test's tmp_path.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator

import pytest

from .test_browser import launched_browser, new_page, open_tab, wait_for_every_plot
from .test_demo_browser import START_TIMEOUT_S, STOP_TIMEOUT_S, DemoProcess

# a bound on waits, not a speed check (a loaded 2-core machine draws slowly)
WAIT_MS = 120_000
# enough trained prompt groups for the lane's points to fill a plot: 60 or more
TRAINED = re.compile(r"\b([6-9]\d|\d{3,}) prompt group\(s\) trained")
# [rollout, age] of each row of the board the browser holds, top first
# a row Tabulator is still drawing has no cells yet: it is read on the next look
BOARD_JS = """
(rows) => rows
  .map((r) => [r.querySelector('[tabulator-field="rollout"]'),
               r.querySelector('[tabulator-field="age (s)"]')])
  .filter(([id, age]) => id && age)
  .map(([id, age]) => [id.innerText, parseFloat(age.innerText)])
"""


@pytest.fixture
def demo(tmp_path) -> Iterator[DemoProcess]:
    proc = DemoProcess(tmp_path / "demo.duckdb", speed=10, extra=("--no-fix-replays",))
    try:
        yield proc
    finally:
        if proc.proc.poll() is None:
            proc.proc.kill()
            proc.proc.wait(10)


def board(page) -> list[tuple[str, float]]:
    return [tuple(r) for r in page.locator(".rs-board .tabulator-row").evaluate_all(BOARD_JS)]


def next_board(page, before: list, *, until) -> list:
    """The board once it differs from ``before`` (a live tick redrew it) and ``until`` holds
    between the two."""
    deadline_ms = WAIT_MS
    step_ms = 250
    while deadline_ms > 0:
        now = board(page)
        if now != before and now and until(before, now):
            return now
        page.wait_for_timeout(step_ms)
        deadline_ms -= step_ms
    raise AssertionError(f"the board never moved on from {before}: now {board(page)}")


def assert_kept_order(before: list, after: list) -> None:
    """Rows on both boards are in the same order and above every row new on ``after``; none
    of them got younger."""
    was = [r for r, _ in before]
    kept = [r for r, _ in after if r in was]
    assert kept == [r for r in was if r in kept], (before, after)
    new = [i for i, (r, _) in enumerate(after) if r not in was]
    assert all(i >= len(kept) for i in new), (before, after)
    ages = dict(before)
    assert all(age >= ages[r] for r, age in after if r in ages), (before, after)


def test_the_board_streams_rollouts_in_a_stable_order_and_staleness_draws(demo, tmp_path):
    url = demo.wait_for(r"dashboard at (http://\S+)", START_TIMEOUT_S).group(1)
    with launched_browser() as browser:
        ctx, page = new_page(browser)
        try:
            page.set_default_timeout(WAIT_MS)
            page.goto(url)
            page.get_by_text("rollouts committed").wait_for()
            open_tab(page, "In flight")
            page.locator(".rs-board .tabulator-row").nth(2).wait_for()
            first = board(page)
            page.screenshot(path=str(tmp_path / "in_flight_first.png"), full_page=True)
            # the next tick: the same rollouts, older, in the same places
            second = next_board(page, first, until=lambda a, b: True)
            assert_kept_order(first, second)
            # a tick on which a rollout of the first board has finished and left
            third = next_board(page, second, until=lambda a, b: any(
                r not in {x for x, _ in b} for r, _ in first))
            assert_kept_order(second, third)
            assert_kept_order(first, third)
            gone = [r for r, _ in first if r not in {x for x, _ in third}]
            assert gone, (first, third)
            ages = dict(first)  # and the ones still there aged
            assert all(age > ages[r] for r, age in third if r in ages), (first, third)
            page.screenshot(path=str(tmp_path / "in_flight_later.png"), full_page=True)

            # staleness: once a train step has trained on something (read every 15 s live)
            page.locator("#rs-staleness-note", has_text=TRAINED).wait_for()
            wait_for_every_plot(page, 2)  # the lane and the lag distribution
            page.screenshot(path=str(tmp_path / "in_flight_staleness.png"), full_page=True)
            assert page.errors == []
        finally:
            ctx.close()
    demo.proc.send_signal(signal.SIGTERM)
    try:
        code = demo.proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = None
    assert code == 0, f"exit {code} after SIGTERM:\n" + "\n".join(demo.lines)
