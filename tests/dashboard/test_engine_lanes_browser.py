"""The Fleet tab in a real browser over a run with engines (conftest's ``engine_path``): the engine lanes are drawn below the shard lanes, and hovering one says what the engine's
scrape said."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rolloutscope.dashboard import style
from rolloutscope.dashboard.app import start_dashboard
from rolloutscope.store import RunStore

from .test_browser import launched_browser, new_page, open_tab
from .conftest import ADDRESSES
from .test_views_browser import FIGURES_JS, TOOLTIP_JS, plots_drawn

pytestmark = pytest.mark.slow
WIDTH = 1600
LANES = 7  # three shards, their three engines, the traced engine
# the lane labels and the lanes of the bars of every lane plot in the document
LANE_PLOTS_JS = """
() => {
  const out = [];
  for (const doc of window.Bokeh.documents) {
    for (const m of doc.all_models) {
      if (m.name !== 'bars' || !m.data_source) continue;
      out.push([...new Set(m.data_source.data.lane)]);
    }
  }
  return out;
}
"""


@pytest.fixture(scope="module")
def served(engine_path) -> Iterator[str]:
    with RunStore(engine_path, read_only=True) as store:
        server = start_dashboard(store, live=False)
        try:
            yield server.url
        finally:
            server.stop()


@pytest.fixture
def page(served):
    with launched_browser() as browser:
        ctx, page = new_page(browser, WIDTH)
        page.goto(served)
        page.wait_for_function("() => window.Bokeh && window.Bokeh.documents.length > 0")
        yield page
        ctx.close()


def engine_hover(page, figure: list) -> str:
    """Sweep the mouse down the lane plot where the engines were scraped (10-15.5 s of the
    run's 100): the first tooltip that names an engine's state."""
    left, top, width, height = figure[:4]
    for dy in range(8, int(height - 30), 4):
        for fx in (0.11, 0.13, 0.145):
            page.mouse.move(left + 215 + (width - 303) * fx, top + dy)
            text = page.evaluate(TOOLTIP_JS)
            if "engine " in text and "serves shard" in text:
                return text
    return ""


def test_the_fleet_tab_draws_engine_lanes_below_the_shards_with_their_scrapes(page, tmp_path):
    open_tab(page, "Fleet")
    plots_drawn(page, 1)
    lanes = page.wait_for_function(
        f"() => {{ const p = ({LANE_PLOTS_JS})().filter((l) => l.some("
        "(x) => x.startsWith('shard'))); return p.length ? p : null; }").json_value()
    drawn = set().union(*map(set, lanes))
    assert {f"engine {a} #0" for a in ADDRESSES} <= drawn
    assert any(label.startswith("engine tests") for label in drawn)
    figures = page.evaluate(FIGURES_JS)
    lane_plot = figures[0]
    assert lane_plot[3] >= style.lane_plot_height(LANES) - 2  # every lane has its height
    text = engine_hover(page, lane_plot)
    page.screenshot(path=str(tmp_path / "fleet_engines.png"), full_page=True)
    assert "running" in text and "waiting" in text and "KV cache" in text
    assert page.errors == []
