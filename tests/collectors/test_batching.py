"""The BatchSpanProcessor sizing both ways out of a process share: its defaults, the SDK's
``OTEL_BSP_*`` variables over them, and that ``connect()`` and the in-process ``instrument()``
both build their processor with it."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from rolloutscope.collectors import batching
from rolloutscope.collectors.batching import (
    DEFAULT_MAX_EXPORT_BATCH_SIZE,
    DEFAULT_MAX_QUEUE_SIZE,
    DEFAULT_SCHEDULE_DELAY_MS,
    ENV_BSP_MAX_EXPORT_BATCH_SIZE,
    ENV_BSP_MAX_QUEUE_SIZE,
    ENV_BSP_SCHEDULE_DELAY,
    env_int,
)
from rolloutscope.collectors.connect import connect

DEFAULTS = {"max_queue_size": DEFAULT_MAX_QUEUE_SIZE,
            "schedule_delay_millis": DEFAULT_SCHEDULE_DELAY_MS,
            "max_export_batch_size": DEFAULT_MAX_EXPORT_BATCH_SIZE}


@pytest.fixture
def built(monkeypatch) -> list[dict]:
    """The sizes of every processor ``batch_span_processor`` builds (a real one each)."""
    for name in (ENV_BSP_MAX_QUEUE_SIZE, ENV_BSP_SCHEDULE_DELAY, ENV_BSP_MAX_EXPORT_BATCH_SIZE):
        monkeypatch.delenv(name, raising=False)
    sizes: list[dict] = []

    class Recording(BatchSpanProcessor):
        def __init__(self, exporter, **kw):
            sizes.append(kw)
            super().__init__(exporter, **kw)

    monkeypatch.setattr(batching, "BatchSpanProcessor", Recording)
    return sizes


def test_env_int_reads_an_integer_and_falls_back_on_anything_else(monkeypatch, caplog):
    monkeypatch.delenv("ROLLOUTSCOPE_TEST_INT", raising=False)
    assert env_int("ROLLOUTSCOPE_TEST_INT", 7) == 7
    monkeypatch.setenv("ROLLOUTSCOPE_TEST_INT", "")
    assert env_int("ROLLOUTSCOPE_TEST_INT", 7) == 7
    monkeypatch.setenv("ROLLOUTSCOPE_TEST_INT", "123")
    assert env_int("ROLLOUTSCOPE_TEST_INT", 7) == 123
    monkeypatch.setenv("ROLLOUTSCOPE_TEST_INT", "lots")
    with caplog.at_level(logging.WARNING, logger=batching.__name__):
        assert env_int("ROLLOUTSCOPE_TEST_INT", 7) == 7
    assert "ROLLOUTSCOPE_TEST_INT='lots'" in caplog.text


def test_connect_sizes_its_processor_from_the_defaults_then_the_variables(built, monkeypatch):
    connect(service_name="sized", endpoint="http://127.0.0.1:9").shutdown()
    monkeypatch.setenv(ENV_BSP_MAX_QUEUE_SIZE, "4096")
    monkeypatch.setenv(ENV_BSP_SCHEDULE_DELAY, "250")
    monkeypatch.setenv(ENV_BSP_MAX_EXPORT_BATCH_SIZE, "512")
    connect(service_name="sized", endpoint="http://127.0.0.1:9").shutdown()
    assert built == [DEFAULTS, {"max_queue_size": 4096, "schedule_delay_millis": 250,
                                "max_export_batch_size": 512}]


def test_the_in_process_exporter_sizes_its_processor_alike(built, tmp_path):
    from rolloutscope.collectors.exporter import instrument

    instrument(tmp_path / "run.duckdb", service_name="sized").shutdown()
    assert built == [DEFAULTS]
