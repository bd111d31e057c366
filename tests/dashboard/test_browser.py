"""The served dashboard in a real Chromium: what only a browser shows.

Serves the P1 run (conftest) read-only on 127.0.0.1 from a thread of this process and drives
Debian's chromium through Playwright. Waits poll the page with deadlines; nothing sleeps.
Screenshots of each main view land in the test's tmp_path.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from rolloutscope.store import RunStore
from rolloutscope.dashboard import style
from rolloutscope.dashboard.app import start_dashboard

playwright_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# a bound on waits, not a speed check: on a 2-core box loaded by the other test worker and two
# busy loops, a dashboard's first page took over 30 s to load (the suite run under load)
TIMEOUT_MS = 90_000

# Every canvas on the page, through Bokeh's shadow roots.
CANVASES_JS = """
() => {
  const out = [];
  const walk = (root) => {
    root.querySelectorAll('*').forEach((el) => {
      if (el.tagName === 'CANVAS') out.push(el);
      if (el.shadowRoot) walk(el.shadowRoot);
    });
  };
  walk(document);
  return out;
}
"""
# Whether an element is on screen. A tab that is not active keeps its models' views laid out,
# hidden by ``visibility: hidden`` (Bokeh's Tabs): offsetParent still names a parent, so it
# alone took the Overview's hidden plots for ones on the tab shown.
SHOWN_JS = "(el) => el.offsetParent !== null && getComputedStyle(el).visibility === 'visible'"
# The most coloured pixels any visible canvas holds (white and transparent do not count).
DRAWN_PIXELS_JS = f"""
() => {{
  let best = 0;
  for (const c of ({CANVASES_JS})()) {{
    if (!c.width || !c.height || !({SHOWN_JS})(c)) continue;
    const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < data.length; i += 16) {{
      const [r, g, b, a] = [data[i], data[i + 1], data[i + 2], data[i + 3]];
      if (a > 0 && !(r > 245 && g > 245 && b > 245) && Math.abs(r - g) + Math.abs(g - b) > 30)
        n += 1;
    }}
    best = Math.max(best, n);
  }}
  return best;
}}
"""
# Coloured pixels of each visible plot on screen, as [top, height, pixels]: a plot's canvases
# share one bounding box, so the most any of them holds is what that plot drew.
PLOT_PIXELS_JS = f"""
() => {{
  const plots = new Map();
  for (const c of ({CANVASES_JS})()) {{
    if (!c.width || !c.height || !({SHOWN_JS})(c)) continue;
    const r = c.getBoundingClientRect();
    if (r.height < 100) continue;  // toolbar and legend glyphs
    const key = [Math.round(r.top), Math.round(r.left), Math.round(r.height)].join(',');
    const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < data.length; i += 16) {{
      const [red, g, b, a] = [data[i], data[i + 1], data[i + 2], data[i + 3]];
      if (a > 0 && !(red > 245 && g > 245 && b > 245) && Math.abs(red - g) + Math.abs(g - b) > 30)
        n += 1;
    }}
    plots.set(key, Math.max(plots.get(key) || 0, n));
  }}
  return [...plots.entries()].map(([k, n]) => [...k.split(',').map(Number), n])
    .sort((a, b) => a[0] - b[0]);
}}
"""
# (start, end) of every Range1d x-range in the Bokeh document.
X_RANGES_JS = """
() => {
  const out = [];
  for (const doc of window.Bokeh.documents) {
    for (const m of doc.all_models) {
      if (m.constructor.__name__ === 'Range1d' && m.name !== 'y') out.push([m.start, m.end]);
    }
  }
  return JSON.stringify(out);
}
"""


@pytest.fixture(scope="module")
def served(p1_path) -> Iterator[str]:
    with RunStore(p1_path, read_only=True) as store:
        server = start_dashboard(store, live=False)
        try:
            assert server.address == "127.0.0.1"
            yield server.url
        finally:
            server.stop()


@contextmanager
def launched_browser() -> Iterator:
    """Debian's Chromium under playwright, closed afterwards."""
    if not shutil.which(CHROMIUM) and not CHROMIUM.startswith("/"):
        pytest.skip("chromium is not installed (scripts/setup.sh --browser)")
    with playwright_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield b
        finally:
            b.close()


def new_page(browser, width: int = 1600):
    """A page in a context of its own (returned with it, to close), with every console error
    and page error it meets collected in ``page.errors``."""
    ctx = browser.new_context(viewport={"width": width, "height": 1000})
    page = ctx.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"{m.text} at {m.location.get('url')}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    return ctx, page


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with launched_browser() as b:
        yield b


@pytest.fixture
def page(browser, served):
    ctx, page = new_page(browser)
    page.goto(served)
    page.wait_for_function("() => window.Bokeh && window.Bokeh.documents.length > 0")
    page.get_by_text("rollouts committed").wait_for()
    yield page
    ctx.close()


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click() if page.get_by_role("tab", name=name).count() \
        else page.locator(".bk-tab", has_text=name).first.click()


def wait_for_plot(page) -> None:
    page.wait_for_function(f"() => ({DRAWN_PIXELS_JS})() > 200", timeout=TIMEOUT_MS)


def wait_for_every_plot(page, count: int) -> list:
    """Wait until ``count`` plots are on screen and each has drawn; their pixels, top first."""
    page.wait_for_function(
        f"(n) => {{ const p = ({PLOT_PIXELS_JS})(); "
        "return p.length >= n && p.every((x) => x[3] > 200); }", arg=count, timeout=TIMEOUT_MS)
    return page.evaluate(PLOT_PIXELS_JS)


def test_the_page_loads_without_console_errors_and_the_timeline_draws(page, tmp_path):
    page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)
    open_tab(page, "Timeline")
    wait_for_plot(page)
    assert page.evaluate(DRAWN_PIXELS_JS) > 200
    page.screenshot(path=str(tmp_path / "timeline.png"), full_page=True)
    assert page.errors == []


def test_incidents_are_listed_and_selecting_one_zooms_the_timeline(page, tmp_path):
    for kind in ("deadline_fired_while_parked", "stranded_completion", "stall", "quarantine"):
        page.locator(".tabulator-cell", has_text=kind).first.wait_for()
    open_tab(page, "Timeline")
    wait_for_plot(page)
    before = page.evaluate(X_RANGES_JS)
    open_tab(page, "Overview")
    page.locator(".tabulator-row", has_text="deadline_fired_while_parked").first.click()
    # selecting from the list opens the timeline, zoomed to the incident: the P1 window,
    # parked 150-210 s, fired at 180 s, padded (other plots' ranges, such as the Overview's
    # whole-run picture, may change too: the wait is for the timeline's)
    page.wait_for_function(f"() => ({X_RANGES_JS})().includes('142.8')")
    wait_for_plot(page)
    ranges = page.evaluate(X_RANGES_JS)
    assert "142.8" in ranges and ranges != before
    page.screenshot(path=str(tmp_path / "timeline_incident.png"), full_page=True)
    open_tab(page, "Incident")
    page.get_by_text("Step by step").wait_for()
    page.get_by_text("The deadline fires while the try is parked").wait_for()
    wait_for_plot(page)
    page.screenshot(path=str(tmp_path / "incident.png"), full_page=True)
    assert page.errors == []


def test_every_fleet_plot_draws_the_shard_lanes_first(page, tmp_path):
    open_tab(page, "Fleet")
    plots = wait_for_every_plot(page, 3)
    page.screenshot(path=str(tmp_path / "fleet.png"), full_page=True)
    lanes, serving = plots[0], plots[1]
    # five lanes of coloured bars, page-wide, each lane as tall as the style allows
    assert lanes[2] == style.lane_plot_height(5) and lanes[3] > 2000
    assert serving[2] == style.SERVING_HEIGHT_PX
    assert page.errors == []


def test_markup_in_span_attributes_renders_as_text(page, tmp_path):
    open_tab(page, "Fleet")
    cell = page.locator(".tabulator-cell", has_text="<script>window.__pwned = 1</script>")
    cell.first.wait_for()
    assert "<b>bold</b>" in cell.first.inner_text()
    page.screenshot(path=str(tmp_path / "fleet.png"), full_page=True)
    open_tab(page, "Rollouts")
    page.locator(".tabulator-cell", has_text="RolloutDataFailure <script>").first.wait_for()
    wait_for_plot(page)
    page.screenshot(path=str(tmp_path / "rollouts.png"), full_page=True)
    open_tab(page, "Checkpoints")
    page.locator(".tabulator-cell", has_text="agent_prepare_incomplete").first.wait_for()
    wait_for_plot(page)
    page.screenshot(path=str(tmp_path / "checkpoints.png"), full_page=True)
    assert page.evaluate("() => window.__pwned") is None
    assert page.errors == []
