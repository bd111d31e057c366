"""The Steps tab in a real Chromium on the demo run: the stacked wall-time plot draws page-wide,
the ledger lists every train step, the stragglers' reasons show as text, and no console error.
Waits poll the page with deadlines; nothing sleeps."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlencode

import pytest

from rolloutscope.dashboard.app import start_dashboard
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RunStore
from rolloutscope.store.ledger import ledger_table, straggler_table

from .test_browser import PLOT_PIXELS_JS, TIMEOUT_MS, launched_browser, new_page

pytestmark = pytest.mark.slow
WIDTH = 1600


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    path = tmp_path_factory.mktemp("steps-browser") / "demo.duckdb"
    with RunStore(path) as store:
        replay_into_store(get("demo"), store, run_id="demo")
    return path


@pytest.fixture(scope="module")
def served(demo) -> Iterator[str]:
    with RunStore(demo, read_only=True) as store:
        server = start_dashboard(store, live=False)
        try:
            yield server.url
        finally:
            server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with launched_browser() as b:
        yield b


def test_the_steps_tab_draws_each_steps_split_and_names_the_stragglers(served, demo, browser,
                                                                       tmp_path):
    with RunStore(demo, read_only=True) as store:
        ledger = ledger_table(store, "demo")
        late = straggler_table(store, "demo")
    parked = late[late.why.str.contains("parked")].iloc[0]
    ctx, page = new_page(browser, WIDTH)
    try:
        page.goto(f"{served}?{urlencode({'run': 'demo', 'tab': 'steps'})}")
        page.wait_for_function("() => window.Bokeh && window.Bokeh.documents.length > 0")
        page.get_by_text(f"{len(ledger)} train steps (rl)").first.wait_for()
        # the stacked bars: one page-wide plot with its glyphs drawn
        page.wait_for_function(
            f"(w) => {{ const p = ({PLOT_PIXELS_JS})(); "
            "return p.length >= 1 && p[0][3] > 200; }", arg=WIDTH, timeout=TIMEOUT_MS)
        page.get_by_text("waiting for stragglers").first.wait_for()
        # a straggler parked by a snapshot, with its reason as text
        page.locator(".tabulator-cell", has_text=parked.rollout_id).first.wait_for()
        page.locator(".tabulator-cell", has_text="by snapshot").first.wait_for()
        cells = page.locator(".tabulator-row").count()
        assert cells >= len(ledger)
        page.screenshot(path=str(tmp_path / "steps.png"), full_page=True)
        assert page.errors == []
    finally:
        ctx.close()
