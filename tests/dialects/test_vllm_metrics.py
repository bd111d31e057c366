"""The recorded vLLM metric names are vLLM's own, and the views read no other ``vllm:`` name.

``ROLLOUTSCOPE_VLLM_SRC`` points at a vLLM checkout or an unpacked wheel (``pip download vllm
--no-deps`` then unzip); without it the check against vLLM's source is skipped, saying so."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from rolloutscope.dialects.vllm_metrics import LABELS, SOURCE_FILE, TYPES, VllmMetric
from rolloutscope.store import views

_DECLARED = re.compile(
    r"self\._(gauge|counter|histogram)_cls\(\s*name=\"(vllm:[a-z0-9_]+)\"(.*?)\)\n", re.S)


def _vllm_source() -> str:
    root = os.environ.get("ROLLOUTSCOPE_VLLM_SRC")
    if not root:
        pytest.skip("ROLLOUTSCOPE_VLLM_SRC is not set (a vLLM checkout or unpacked wheel)")
    path = Path(root) / SOURCE_FILE
    if not path.is_file():
        pytest.fail(f"ROLLOUTSCOPE_VLLM_SRC={root} holds no {SOURCE_FILE}")
    return path.read_text()


def declared(source: str) -> dict[str, tuple[str, str]]:
    """vLLM metric name -> (its prometheus_client type, the rest of its declaration)."""
    return {m.group(2): (m.group(1), m.group(3)) for m in _DECLARED.finditer(source)}


class TestAgainstVllmSource:
    def test_every_recorded_name_is_declared_by_vllms_prometheus_logger_with_its_type(self):
        found = declared(_vllm_source())
        assert len(found) > 20  # the pattern still reads vLLM's declarations at all
        assert {m.value: found.get(m.value, ("absent",))[0] for m in VllmMetric} == \
            {m.value: TYPES[m].value for m in VllmMetric}

    def test_every_recorded_name_carries_the_model_name_and_engine_labels(self):
        source = _vllm_source()
        assert re.search(r"labelnames = \[\"model_name\", \"engine\"\]", source)
        assert LABELS == ("model_name", "engine")
        found = declared(source)
        for metric in VllmMetric:
            assert "labelnames=labelnames," in found[metric.value][1], metric


class TestTheViewsReadOnlyRecordedNames:
    def test_every_vllm_name_in_the_sql_is_recorded(self):
        recorded = {m.value for m in VllmMetric}
        used = {name for _, text in views.definitions()
                for name in re.findall(r"'(vllm:[a-z0-9_]+)'", text)}
        assert used and used <= recorded, sorted(used - recorded)

    def test_every_recorded_name_has_a_type(self):
        assert set(TYPES) == set(VllmMetric)
