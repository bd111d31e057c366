"""Window mode in a real Chromium: the dashboard of a run over the span threshold opens, the
Timeline says which stretch of the run it shows and draws its lanes there, and the Overview
offers the whole run to pick a stretch from. Waits poll the page with deadlines; nothing
sleeps."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest

from rolloutscope.dashboard.app import start_dashboard
from rolloutscope.dashboard.shared import DashboardLimits
from rolloutscope.store import RunStore
from tests.synthetic_run import synthetic_run

from .test_browser import (PLOT_PIXELS_JS, TIMEOUT_MS, X_RANGES_JS, launched_browser, new_page,
                           open_tab, playwright_api, wait_for_plot)

pytestmark = pytest.mark.slow
WIDTH = 1600


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[str]:
    path = synthetic_run(tmp_path_factory.mktemp("window-browser") / "run.duckdb",
                         spans=20_000)
    with RunStore(path, read_only=True) as store:
        server = start_dashboard(store, live=False,
                                 limits=DashboardLimits(window_spans=1_000, window_minutes=15))
        try:
            yield server.url
        finally:
            server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with launched_browser() as b:
        yield b


def test_the_timeline_of_a_large_run_shows_its_window_and_draws_it(served, browser):
    ctx, page = new_page(browser, WIDTH)
    try:
        page.goto(f"{served}?{urlencode({'tab': 'timeline'})}")
        page.wait_for_function("() => window.Bokeh && window.Bokeh.documents.length > 0")
        # the run is 5,000 s long: its last 15 minutes
        note = page.locator(".rs-window").first
        note.wait_for(timeout=TIMEOUT_MS)
        assert "(4,100 s to 5,000 s) of a 1.4 h run" in note.inner_text()
        # the lanes draw, page-wide, on the window
        page.wait_for_function(
            f"() => {{ const p = ({PLOT_PIXELS_JS})(); "
            "return p.length >= 1 && p[0][3] > 200; }", timeout=TIMEOUT_MS)
        ranges = json.loads(page.evaluate(X_RANGES_JS))
        assert any(abs(r[0] - 4100) < 1 and abs(r[1] - 5000) < 1 for r in ranges), ranges
        assert page.errors == []
    finally:
        ctx.close()


def test_the_overview_of_a_large_run_offers_the_whole_run_to_pick_from(served, browser):
    ctx, page = new_page(browser, WIDTH)
    try:
        page.goto(served)
        page.wait_for_function("() => window.Bokeh && window.Bokeh.documents.length > 0")
        page.get_by_text("drag across it (box select)").first.wait_for(timeout=TIMEOUT_MS)
        page.locator(".rs-window").first.wait_for(timeout=TIMEOUT_MS)
        assert page.errors == []
    finally:
        ctx.close()


def test_picking_an_incident_on_the_overview_of_a_large_run_moves_its_window(served, browser,
                                                                             tmp_path):
    """A click on a row of the incident list, with the whole-run picture above it: the server
    hears the selection and reads the incident's stretch (the window note says which)."""
    ctx, page = new_page(browser, WIDTH)
    try:
        page.goto(served)
        page.wait_for_function("() => window.Bokeh && window.Bokeh.documents.length > 0")
        page.get_by_text("drag across it (box select)").first.wait_for(timeout=TIMEOUT_MS)
        note = page.locator(".rs-window").first
        note.wait_for(timeout=TIMEOUT_MS)
        assert "(4,100 s to 5,000 s)" in note.inner_text()
        page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)
        # back from a look at the Timeline: the Overview's models are built again (dynamic
        # tabs), its table a new one
        open_tab(page, "Timeline")
        wait_for_plot(page)
        open_tab(page, "Overview")
        # the wedged backend, from 1,237 s: far from the run's last 15 minutes
        page.locator(".tabulator-row", has_text="wedged_backend").first.click()
        playwright_api.expect(note).not_to_contain_text("(4,100 s to 5,000 s)",
                                                        timeout=TIMEOUT_MS)
        lo, hi = (float(v.replace(",", "")) for v in
                  re.search(r"\(([\d,.]+) s to ([\d,.]+) s\)", note.inner_text()).groups())
        assert lo <= 1237 <= hi, (lo, hi)
        playwright_api.expect(page).to_have_url(re.compile(r"[?&]incident="),
                                                timeout=TIMEOUT_MS)
        # no error: the hidden Timeline's window note, updated off the page, once pointed the
        # page's loading.css at Panel's CDN (tabs._ServedHTML)
        assert page.errors == []
    finally:
        ctx.close()
