"""A collector given a token requires it everywhere: OTLP/HTTP, OTLP/gRPC, the query endpoint
and the live dashboard it serves on loopback, with the ``Bearer`` scheme in any case (RFC 7235)
and, for the dashboard, a session cookie after a first visit with ``?token=``. Shown in a real
Chromium too: the refusal without the token, the dashboard with it."""

from __future__ import annotations

import http.client
import shutil
from urllib.parse import urlsplit

import grpc
import pytest

from rolloutscope.cli.serve import DASHBOARD_READY_PREFIX
from tests.collectors import hostile
from tests.collectors.conftest import start_collector
from tests.collectors.otlp_fixtures import span_request

TOKEN = "t0ken-for-the-dashboard-tests"
REFUSAL = "401: this dashboard needs the collector's token"


def _get(url: str, path: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    directory = tmp_path_factory.mktemp("token-everywhere")
    (directory / "token").write_text(TOKEN + "\n")
    c = start_collector(directory / "run.duckdb", "--token-file", str(directory / "token"),
                        "--dashboard-port", "0", token=TOKEN)
    c.dashboard = c.wait_for_line(DASHBOARD_READY_PREFIX)[len(DASHBOARD_READY_PREFIX):].strip()
    body = span_request(hostile.BEFORE_SPANS, run_id=hostile.BEFORE_RUN).SerializeToString()
    assert hostile.post(c.http, "/v1/traces", body,
                        headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
    yield c
    c.stop()


def _before_intact(c) -> None:
    assert c.alive()
    assert c.client.query_records(
        f"SELECT count(*) AS n FROM spans WHERE run_id = '{hostile.BEFORE_RUN}'") == [
        {"n": hostile.BEFORE_SPANS}]
    assert hostile.rss_mib(c.process.pid) < hostile.RSS_CEILING_MIB


@pytest.mark.parametrize(("authorization", "status"), [
    (f"bearer {TOKEN}", 200),
    (f"BEARER {TOKEN}", 200),
    (f"BeArEr {TOKEN}", 200),
    (f"Bearer   {TOKEN}", 200),
    ("Bearer", 401),
    (f"Bearer{TOKEN}", 401),
    (f"Bearer {TOKEN} extra", 401),
    (f"Basic {TOKEN}", 401),
])
def test_the_bearer_scheme_is_matched_in_any_case_and_the_token_exactly(guarded, authorization,
                                                                        status):
    body = span_request(1, run_id="scheme-case").SerializeToString()
    got, answer, _ = hostile.post(guarded.http, "/v1/traces", body,
                                  headers={"Authorization": authorization})
    assert got == status
    if status == 401:
        assert b"missing or wrong bearer token" in answer
    _before_intact(guarded)


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
def test_grpc_takes_the_bearer_scheme_in_any_case(guarded, scheme):
    with grpc.insecure_channel(guarded.grpc) as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        export(span_request(1).SerializeToString(),
               metadata=(("authorization", f"{scheme} {TOKEN}"),), timeout=30)
        with pytest.raises(grpc.RpcError) as info:
            export(span_request(1).SerializeToString(),
                   metadata=(("authorization", f"{scheme} wrong"),), timeout=30)
    assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "missing or wrong bearer token" in info.value.details()
    _before_intact(guarded)


@pytest.mark.parametrize(("path", "headers"), [
    ("/", {}),
    ("/?token=wrong", {}),
    ("/", {"Authorization": "Bearer wrong"}),
    ("/", {"Cookie": "rolloutscope_session=forged"}),
    ("/", {"Cookie": f"rolloutscope_session={TOKEN}"}),  # the cookie holds no token
])
def test_the_dashboard_refuses_a_visit_without_the_token(guarded, path, headers):
    status, got, _ = _get(guarded.dashboard, path, headers)
    assert status == 302 and "token-required" in got["location"]
    status, _, page = _get(guarded.dashboard, "/token-required")
    assert status == 401 and REFUSAL in page.decode()
    _before_intact(guarded)


def test_the_dashboard_takes_the_token_once_then_its_session_cookie(guarded):
    status, headers, page = _get(guarded.dashboard, f"/?token={TOKEN}")
    assert status == 200 and b"bokeh" in page.lower()
    cookie = headers["set-cookie"].split(";", 1)[0]
    assert TOKEN not in cookie and "HttpOnly" in headers["set-cookie"]
    assert _get(guarded.dashboard, "/", {"Cookie": cookie})[0] == 200
    assert _get(guarded.dashboard, "/", {"Authorization": f"bearer {TOKEN}"})[0] == 200
    _before_intact(guarded)


def test_in_a_browser_the_dashboard_is_refused_without_the_token_and_shown_with_it(guarded):
    playwright_api = pytest.importorskip("playwright.sync_api")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium,
                                     args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_context().new_page()
            page.set_default_timeout(60_000)
            response = page.goto(guarded.dashboard)
            assert response.status == 401
            assert REFUSAL in page.content()
            assert page.evaluate("() => typeof window.Bokeh") == "undefined"
            page.goto(f"{guarded.dashboard}?token={TOKEN}")
            page.wait_for_function("() => window.Bokeh && window.Bokeh.documents.length > 0")
            page.get_by_text("rolloutscope").first.wait_for()
            page.goto(guarded.dashboard)  # the cookie carries the session from here on
            page.wait_for_function("() => window.Bokeh && window.Bokeh.documents.length > 0")
        finally:
            browser.close()
    _before_intact(guarded)
