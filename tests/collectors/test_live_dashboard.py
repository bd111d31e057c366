"""`rolloutscope serve` also serves the live dashboard, from the process that writes the run."""

from __future__ import annotations

import urllib.request

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from rolloutscope.cli.serve import DASHBOARD_READY_PREFIX

from .conftest import start_collector


def test_the_collector_serves_a_live_dashboard_over_the_run_it_writes(tmp_path):
    collector = start_collector(tmp_path / "run.duckdb", "--dashboard-port", "0")
    try:
        url = collector.wait_for_line(DASHBOARD_READY_PREFIX)[len(DASHBOARD_READY_PREFIX):].strip()
        assert url.startswith("http://127.0.0.1:")
        provider = TracerProvider(resource=Resource.create({"service.name": "t",
                                                            "nemo.run.id": "live-1"}))
        provider.add_span_processor(SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=f"{collector.http}/v1/traces")))
        provider.get_tracer("t").start_span("rl.train_step").end()
        provider.shutdown()
        assert collector.count() == 1
        with urllib.request.urlopen(url, timeout=30) as page:
            body = page.read().decode()
        assert page.status == 200 and "bokeh" in body.lower()
    finally:
        collector.stop()
