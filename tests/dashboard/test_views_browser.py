"""Every tab and every incident kind in a real Chromium: plots page-wide with glyphs drawn, a
hover that shows its span, a zoom that moves the linked plots and the other tabs, the deep link
that reopens a view, no console error.

Serves the incident zoo (one store, an incident of each of the 19 kinds; the demo scenario's run
with its fix replays beside it) read-only from a thread of this process. Waits poll the page
with deadlines; nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from rolloutscope.dashboard.app import start_dashboard
from rolloutscope.replay.fixes import fix_plans, replay_fixes
from rolloutscope.store import RunStore
from rolloutscope.vocabulary import IncidentKind

from .incident_zoo import build_zoo
from .test_browser import PLOT_PIXELS_JS, TIMEOUT_MS, launched_browser, new_page

pytestmark = pytest.mark.slow
WIDTH = 1600
# [left, top, width, height] of each figure's canvas on screen, and its x range
FIGURES_JS = """
() => {
  const out = [];
  for (const doc of window.Bokeh.documents) {
    for (const m of doc.all_models) {
      if (m.constructor.__name__ !== 'Figure' || !m.x_range || m.x_range.start === undefined)
        continue;
      const view = [...Object.values(window.Bokeh.index)].flatMap(function all(v) {
        return [v, ...(v.child_views || []).flatMap(all)]; }).find((v) => v.model === m);
      if (!view || !view.el || !view.el.offsetParent) continue;
      const r = view.el.getBoundingClientRect();
      out.push([r.left, r.top, r.width, r.height, m.x_range.start, m.x_range.end,
                m.x_range.id]);
    }
  }
  return out.sort((a, b) => a[1] - b[1]);
}
"""
TOOLTIP_JS = f"""
() => {{
  const texts = [];
  const walk = (root) => root.querySelectorAll('*').forEach((el) => {{
    if (el.classList && el.classList.contains('bk-tooltip-content') && el.offsetParent
        && el.innerText.trim()) texts.push(el.innerText);
    if (el.shadowRoot) walk(el.shadowRoot);
  }});
  walk(document);
  return texts.join('\\n');
}}
"""


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    path = tmp_path_factory.mktemp("zoo-browser") / "zoo.duckdb"
    chosen = build_zoo(path)
    with RunStore(path) as store:  # the demo run's fix replays, as rolloutscope demo writes
        kinds = [k for (k,) in store.query("SELECT DISTINCT kind FROM incidents "
                                           "WHERE run_id = 'demo'")]
        list(replay_fixes(store, "demo", fix_plans(kinds)[0]))
    return path, chosen


@pytest.fixture(scope="module")
def served(zoo) -> Iterator[str]:
    with RunStore(zoo[0], read_only=True) as store:
        server = start_dashboard(store, live=False)
        try:
            yield server.url
        finally:
            server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with launched_browser() as b:
        yield b


@pytest.fixture
def page(browser):
    ctx, page = new_page(browser, WIDTH)
    yield page
    ctx.close()


def open_link(page, url: str, **query) -> None:
    page.goto(url + ("?" + urlencode(query) if query else ""))
    page.wait_for_function("() => window.Bokeh && window.Bokeh.documents.length > 0")


def plots_drawn(page, count: int) -> list:
    """Wait until ``count`` plots are on screen, each page-wide and drawn."""
    page.wait_for_function(
        f"([n, w]) => {{ const p = ({PLOT_PIXELS_JS})(); "
        "return p.length >= n && p.slice(0, n).every((x) => x[3] > 200); }",
        arg=[count, WIDTH], timeout=TIMEOUT_MS)
    return page.wait_for_function(
        f"(n) => {{ const f = ({FIGURES_JS})(); return f.length >= n ? f : null; }}",
        arg=count, timeout=TIMEOUT_MS).json_value()


def hover_text(page, figure: list, step: int = 6) -> str:
    """Sweep the mouse over a figure's data until a tooltip shows; its text. ``step``: pixels
    between rows of the sweep (a line is a few pixels thick)."""
    left, top, width, height = figure[:4]
    for dy in range(8, int(min(height - 40, 240)), step):
        for fx in (0.5, 0.35, 0.65, 0.2, 0.8, 0.92):
            page.mouse.move(left + 220 + (width - 290) * fx, top + dy)
            text = page.evaluate(TOOLTIP_JS)
            if text:
                return text
    return ""


def tab_of(page) -> str:
    return page.locator(".bk-tab.bk-active").first.inner_text().strip()


KINDS = sorted(k.value for k in IncidentKind)


@pytest.mark.parametrize("kind", KINDS)
def test_every_incident_kind_draws_its_story_page_wide_with_hovers(served, zoo, page, kind,
                                                                 tmp_path):
    run_id, incident_id = zoo[1][kind]
    open_link(page, served, run=run_id, tab="incident", incident=incident_id)
    page.get_by_text("Step by step").first.wait_for() if kind != "router_fleet_divergence" \
        else page.get_by_text("What happened").first.wait_for()
    figures = plots_drawn(page, 1)
    assert tab_of(page) == "Incident"
    lanes = figures[0]
    assert lanes[2] > 0.5 * WIDTH  # the plot column takes the page right of the story
    text = hover_text(page, lanes)
    assert "lane:" in text or kind in text, text  # a bar's span, or the stall's shading
    page.screenshot(path=str(tmp_path / f"incident-{kind}.png"), full_page=True)
    assert page.errors == []


def test_every_tab_draws_and_a_zoom_moves_every_linked_plot_and_the_other_tabs(served, page,
                                                                               tmp_path):
    open_link(page, served, run="demo")
    page.get_by_text("rollouts committed").wait_for()
    page.locator("div.bk-tab", has_text="Timeline").first.click()
    figures = plots_drawn(page, 3)  # lanes, gauges, serving
    assert all(f[2] > 0.9 * WIDTH for f in figures[:3])
    assert "lane" in hover_text(page, figures[0])
    serving = hover_text(page, figures[2], step=2)  # a line: which, when, how many
    assert "serving:" in serving and ("shards in fleet" in serving
                                      or "fleet serving shards" in serving), serving
    before = figures[0][4:6]
    left, top, width, height = figures[0][:4]
    page.mouse.move(left + width / 2, top + min(height / 2, 200))
    page.mouse.wheel(0, -600)  # the x wheel zoom, active on every time plot
    page.wait_for_function(
        f"(b) => {{ const f = ({FIGURES_JS})(); return f.length >= 3 && "
        "(f[0][4] !== b[0] || f[0][5] !== b[1]); }", arg=before)
    zoomed = page.evaluate(FIGURES_JS)
    assert zoomed[0][5] - zoomed[0][4] < before[1] - before[0]
    for f in zoomed[1:3]:  # gauges and serving follow in the browser
        assert f[4:6] == pytest.approx(zoomed[0][4:6])
    page.locator("div.bk-tab", has_text="Fleet").first.click()
    page.wait_for_function(
        f"(z) => {{ const f = ({FIGURES_JS})(); return f.length >= 2 && "
        "Math.abs(f[0][4] - z[0]) < 0.01 && Math.abs(f[0][5] - z[1]) < 0.01; }",
        arg=zoomed[0][4:6])  # the other tab shows the same window
    page.get_by_text("every plot:").first.wait_for()
    page.wait_for_function("() => window.location.search.includes('tab=fleet')")
    q = parse_qs(urlparse(page.url).query)
    assert q["tab"] == ["fleet"] and float(q["t0"][0]) == pytest.approx(zoomed[0][4], abs=0.01)
    page.get_by_role("button", name="Whole run").first.click()
    page.wait_for_function(
        f"() => {{ const f = ({FIGURES_JS})(); return f.length && f[0][4] === 0; }}")
    for tab, count in (("Checkpoints", 1), ("Rollouts", 1), ("Traces", 1), ("Incident", 1)):
        page.locator("div.bk-tab", has_text=tab).first.click()
        plots_drawn(page, count)
        page.screenshot(path=str(tmp_path / f"{tab.lower()}.png"), full_page=True)
    page.locator("div.bk-tab", has_text="Replay").first.click()
    page.locator(".tabulator-cell", has_text="vanished").first.wait_for()
    page.locator(".tabulator-cell", has_text="timed_out").first.wait_for()
    plots_drawn(page, 2)  # before and after
    page.locator("div.bk-tab", has_text="Diff").first.click()
    page.get_by_text("B − A per train step").first.wait_for()
    plots_drawn(page, 1)
    page.screenshot(path=str(tmp_path / "diff.png"), full_page=True)
    assert page.errors == []


def test_a_link_reopens_the_run_tab_incident_and_range(served, zoo, page):
    run_id, incident_id = zoo[1]["quarantine"]
    open_link(page, served, run=run_id, tab="timeline", incident=incident_id, t0="150",
              t1="420")
    figures = plots_drawn(page, 1)
    assert tab_of(page) == "Timeline"
    assert figures[0][4:6] == pytest.approx([150.0, 420.0])
    chosen = page.locator("select").nth(1).evaluate("s => s.options[s.selectedIndex].text")
    assert "quarantine" in chosen
    assert page.errors == []


# A tab and "Whole run" clicked in one task, as a quick hand does: the click reaches the server
# while the tab change is still pending, and Panel then handles the click outside the Bokeh
# document lock. The plots it redraws must still move.
CLICK_TAB_THEN_WHOLE_RUN_JS = """
(tab) => {
  const all = [];
  const walk = (root) => root.querySelectorAll('*').forEach((el) => {
    all.push(el);
    if (el.shadowRoot) walk(el.shadowRoot);
  });
  walk(document);
  const header = all.find((el) => el.classList && el.classList.contains('bk-tab')
                                 && el.innerText.trim() === tab);
  const button = all.find((el) => el.tagName === 'BUTTON' && el.innerText.trim() === 'Whole run');
  header.click();
  button.click();
}
"""


def test_a_link_to_the_timeline_then_fleet_and_whole_run_at_once(served, page):
    """Opened on a tab without a table, the page still draws the tables of the next tab, and
    the redraw a click makes outside the document lock still lands."""
    open_link(page, served, run="demo", tab="timeline", t0="150", t1="420")
    figures = plots_drawn(page, 3)
    assert figures[0][4:6] == pytest.approx([150.0, 420.0])
    page.evaluate(CLICK_TAB_THEN_WHOLE_RUN_JS, "Fleet")
    page.wait_for_function(
        f"() => {{ const f = ({FIGURES_JS})(); return f.length >= 2 && "
        "f.every((x) => x[4] === 0); }")
    assert tab_of(page) == "Fleet"
    page.locator(".tabulator-col-title", has_text="probe fails").first.wait_for()
    page.locator(".tabulator-cell >> visible=true").first.wait_for()  # the transitions, drawn
    page.get_by_text("every plot: 0.0 s to").first.wait_for()
    assert page.errors == []
