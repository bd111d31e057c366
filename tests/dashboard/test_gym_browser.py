"""The dashboard in a real Chromium on data that is not rolloutscope's own: the real Gym 0.7.0
capture, an empty store, stores whose spans name no run or have no runs row, OTel's example
payloads, and a live collector before its first span. Every page shows a clear state; no
console error; no traceback in the server's log."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import duckdb
import pytest

from rolloutscope.collectors.exporter import instrument
from rolloutscope.store import RunStore
from tests.collectors.conftest import start_collector
from tests.gym_capture import RUN_ID, collect_capture, post_capture
from tests.store.conftest import SpanKit

from .gym_pages import (
    browser_page,
    check_every_tab,
    no_traceback,
    open_page,
    open_tab,
    plots_drawn,
    served,
    slow_browser,
    text_shown,
)

pytestmark = pytest.mark.slow
OTEL_EXAMPLES = Path(__file__).parents[1] / "fixtures" / "otel-proto-examples"


@pytest.fixture(scope="module")
def gym_db(tmp_path_factory) -> Path:
    return collect_capture(tmp_path_factory.mktemp("gymdash") / "gym.duckdb")


def test_every_tab_of_the_real_gym_capture_draws(gym_db, tmp_path):
    check_every_tab(gym_db, tmp_path, rollout="0-0-a1")


def test_an_empty_store_says_it_holds_no_run_on_every_tab(tmp_path):
    db = tmp_path / "empty.duckdb"
    RunStore(db).close()
    with served(["dashboard", str(db), "--port", "0", "--no-browser"], "dashboard: ") as (
            url, log), browser_page() as page:
        open_page(page, url)
        text_shown(page, "holds no run: nothing was ever written to it")
        text_shown(page, "no run in this store")
        for tab, says in (("Timeline", "holds no run"), ("Checkpoints", "holds no run"),
                          ("Fleet", "holds no run"), ("Rollouts", "holds no run"),
                          ("Traces", "holds no run"), ("Incident", "No incident in this run"),
                          ("Replay", "No run in this store yet")):
            open_tab(page, tab)
            text_shown(page, says)
            page.screenshot(path=str(tmp_path / f"empty-{tab.lower()}.png"), full_page=True)
        text_shown(page, "no run in this store")
        assert page.errors == []
    no_traceback(log.text())


def _generic_store(path: Path) -> None:
    """Spans no model view reads, from an SDK that names no run."""
    inst = instrument(path, service_name="some-service")
    try:
        kit = SpanKit(inst)
        root = kit.span("GET /items", 0, 2, {"http.route": "/items"})
        kit.span("SELECT items", 0.5, 1.5, {"db.system": "postgresql"}, parent=root)
        kit.flush()
    finally:
        inst.shutdown()


def test_a_run_with_only_generic_spans_says_what_it_holds(tmp_path):
    db = tmp_path / "generic.duckdb"
    _generic_store(db)
    with served(["dashboard", str(db), "--port", "0", "--no-browser"], "dashboard: ") as (
            url, log), browser_page() as page:
        open_page(page, url)
        text_shown(page, "run generic")  # the store's default run, named after the file
        text_shown(page, "No rollout, checkpoint, fleet or incident rows in this run")
        text_shown(page, "It holds 2 spans of 2 names from 1 process")
        page.locator(".tabulator-cell", has_text="SELECT items").first.wait_for()
        page.screenshot(path=str(tmp_path / "generic-overview.png"), full_page=True)
        open_tab(page, "Checkpoints")
        text_shown(page, "No checkpoint telemetry in this run; it holds 2 spans")
        open_tab(page, "Rollouts")
        text_shown(page, "No rollout attempts in this run")
        open_tab(page, "Traces")
        page.locator("select").first.select_option(index=1)
        plots_drawn(page, 1)
        text_shown(page, "· SELECT items")
        page.screenshot(path=str(tmp_path / "generic-traces.png"), full_page=True)
        assert page.errors == []
    no_traceback(log.text())


def test_spans_without_a_runs_row_or_without_a_run_are_shown_or_named(tmp_path):
    no_row, no_run = tmp_path / "norow.duckdb", tmp_path / "norun.duckdb"
    for db in (no_row, no_run):
        _generic_store(db)
        con = duckdb.connect(str(db))
        con.execute("DELETE FROM runs")  # a file another writer left without its runs row
        if db == no_run:  # and one written before rows without a run got the default one,
            # so before stores kept maintained rows too (they came later): none here
            con.execute("UPDATE spans SET run_id = NULL")
            con.execute("DROP TABLE derive_state")
        con.close()
    with served(["dashboard", str(no_row), "--port", "0", "--no-browser"], "dashboard: ") as (
            url, log), browser_page() as page:
        open_page(page, url)
        text_shown(page, "run norow")
        text_shown(page, "It holds 2 spans")
        open_tab(page, "Timeline")
        text_shown(page, "No rollout, checkpoint or fleet rows to draw in this run")
        assert page.errors == []
    no_traceback(log.text())
    with served(["dashboard", str(no_run), "--port", "0", "--no-browser"], "dashboard: ") as (
            url, log), browser_page() as page:
        open_page(page, url)
        text_shown(page, "2 span(s) in this file name no run")
        open_tab(page, "Fleet")
        text_shown(page, "2 span(s) in this file name no run")
        page.screenshot(path=str(tmp_path / "norun-fleet.png"), full_page=True)
        assert page.errors == []
    no_traceback(log.text())


def test_otels_example_payloads_get_a_run_and_their_trace_is_drawn(tmp_path):
    db = tmp_path / "otel.duckdb"
    collector = start_collector(db)
    try:
        for signal in ("trace", "metrics", "logs"):
            body = (OTEL_EXAMPLES / f"{signal}.json").read_bytes()
            path = {"trace": "traces"}.get(signal, signal)
            req = urllib.request.Request(f"{collector.http}/v1/{path}", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                assert resp.status == 200
    finally:
        collector.stop()
    with RunStore(db, read_only=True) as store:
        assert store.run_ids() == ["otel"]
        assert store.query("SELECT run_id, name, service FROM spans") == [
            ("otel", "I'm a server span", "my.service")]
        assert store.query("SELECT count(*) FROM metrics WHERE run_id = 'otel' AND "
                           "service = 'my.service'")[0][0] == 3
        assert store.query("SELECT run_id, body FROM logs") == [("otel", "Example log record")]
        (root,) = store.query_df("SELECT * FROM trace_roots").itertuples()
        assert root.orphan and root.trace_id == "5b8efff798038103d269b633813fc60c"
    with served(["dashboard", str(db), "--port", "0", "--no-browser"], "dashboard: ") as (
            url, log), browser_page() as page:
        open_page(page, url)
        text_shown(page, "run otel")
        # The tab's spans table is built while the trace is drawn. On a slow browser it used to
        # stay empty: its rows reached it as a change while it was still being built, and
        # Panel's Tabulator drops those (every run at this rate, and once in a loaded CI run).
        slow_browser(page)
        open_tab(page, "Traces")
        page.locator("select").first.select_option(index=1)
        plots_drawn(page, 1)
        text_shown(page, "trace 5b8efff798038103d269b633813fc60c: 1 spans")
        page.locator(".tabulator-cell", has_text="my.span.attr").first.wait_for()
        page.screenshot(path=str(tmp_path / "otel-traces.png"), full_page=True)
        assert page.errors == []
    no_traceback(log.text())


def test_live_before_the_first_span_waits_and_then_shows_the_run(tmp_path):
    db = tmp_path / "live.duckdb"
    cmd = ["serve", "--db", str(db), "--otlp-http-port", "0", "--otlp-grpc-port", "0",
           "--dashboard-port", "0"]
    with served(cmd, "rolloutscope dashboard ready ") as (url, log), browser_page() as page:
        http = next(line.split("http=", 1)[1].split()[0] for line in log.lines
                    if line.startswith("rolloutscope collector ready "))
        open_page(page, url)
        text_shown(page, f"Waiting for the first span on OTLP/HTTP {http}")
        text_shown(page, "waiting for the first span")
        for tab in ("Timeline", "Rollouts", "Traces"):
            open_tab(page, tab)
            text_shown(page, "Waiting for the first span")
        page.screenshot(path=str(tmp_path / "live-waiting.png"), full_page=True)
        post_capture(http)
        open_tab(page, "Overview")
        text_shown(page, f"run {RUN_ID}")  # the next tick found the run, no reload
        text_shown(page, "Gym rollouts finished")
        page.screenshot(path=str(tmp_path / "live-arrived.png"), full_page=True)
        assert page.errors == []
    no_traceback(log.text())
