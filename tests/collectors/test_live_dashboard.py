"""`rolloutscope serve` also serves the live dashboard over the run it writes, from a process of
its own that reads through the collector's query endpoint: killing it loses no span and
stops no ingest, and it comes back."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from rolloutscope.cli.serve import DASHBOARD_READY_PREFIX

from .conftest import start_collector


def _send(http: str, n: int, run_id: str = "live-1") -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "t",
                                                        "nemo.run.id": run_id}))
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=f"{http}/v1/traces")))
    for _ in range(n):
        provider.get_tracer("t").start_span("rl.train_step").end()
    provider.shutdown()


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as page:
        assert page.status == 200
        return page.read().decode()


def _children(pid: int) -> dict[int, str]:
    """The processes ``pid`` started, with their command lines."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            out[int(child)] = cmd
    return out


def _dashboard_pid(collector_pid: int, http: str) -> int:
    found = [pid for pid, cmd in _children(collector_pid).items()
             if " dashboard " in cmd and http in cmd]
    assert len(found) == 1, _children(collector_pid)
    return found[0]


def test_the_collector_serves_a_live_dashboard_over_the_run_it_writes(tmp_path):
    collector = start_collector(tmp_path / "run.duckdb", "--dashboard-port", "0")
    try:
        url = collector.wait_for_line(DASHBOARD_READY_PREFIX)[len(DASHBOARD_READY_PREFIX):].strip()
        assert url.startswith("http://127.0.0.1:")
        _send(collector.http, 1)
        assert collector.count() == 1
        assert "bokeh" in _page(url).lower()
    finally:
        collector.stop()


def test_the_dashboard_is_its_own_process_and_killing_it_loses_nothing(tmp_path):
    collector = start_collector(tmp_path / "run.duckdb", "--dashboard-port", "0")
    try:
        url = collector.wait_for_line(DASHBOARD_READY_PREFIX)[len(DASHBOARD_READY_PREFIX):].strip()
        pid = _dashboard_pid(collector.process.pid, collector.http)
        assert pid != collector.process.pid
        _send(collector.http, 5)
        assert "bokeh" in _page(url).lower()  # a session was built: the dashboard read the run
        os.kill(pid, signal.SIGKILL)
        _send(collector.http, 7)  # ingest goes on while it is gone
        assert collector.alive() and collector.count() == 12
        deadline = time.monotonic() + 120
        while True:  # it is started again, on the same URL
            try:
                children = _children(collector.process.pid)
                back = [p for p, cmd in children.items() if " dashboard " in cmd]
                if back and back[0] != pid and "bokeh" in _page(url).lower():
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the dashboard did not come back"
            time.sleep(1)
        assert collector.count() == 12
    finally:
        assert collector.stop() == 0
    # stopping the collector stops its dashboard
    deadline = time.monotonic() + 30
    while Path(f"/proc/{back[0]}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{back[0]}").exists()
