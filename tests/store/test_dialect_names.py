"""The names rolloutscope reads from other processes' dialects (rolloutscope/vocabulary.py:
GenAIAttr, GenAIOperation, OpenInferenceAttr, VllmAttr) are the names those projects spell:
OpenTelemetry's semantic conventions and OpenInference's, as installed by the test extra, and
vLLM's own source where a tree of it is given (``ROLLOUTSCOPE_VLLM_SRC``: a checkout, or an
unpacked wheel; vLLM does not install here)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from rolloutscope.vocabulary import (GenAIAttr, GenAIOperation, OpenInferenceAttr, SpanName,
                                     VllmAttr)


def test_genai_names_are_the_semantic_conventions():
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as g

    assert {name: value for name, value in vars(GenAIAttr).items() if name.isupper()} == {
        "OPERATION": g.GEN_AI_OPERATION_NAME, "PROVIDER": g.GEN_AI_PROVIDER_NAME,
        "SYSTEM": g.GEN_AI_SYSTEM, "REQUEST_MODEL": g.GEN_AI_REQUEST_MODEL,
        "RESPONSE_MODEL": g.GEN_AI_RESPONSE_MODEL, "RESPONSE_ID": g.GEN_AI_RESPONSE_ID,
        "RESPONSE_FINISH_REASONS": g.GEN_AI_RESPONSE_FINISH_REASONS,
        "INPUT_TOKENS": g.GEN_AI_USAGE_INPUT_TOKENS,
        "OUTPUT_TOKENS": g.GEN_AI_USAGE_OUTPUT_TOKENS,
        "PROMPT_TOKENS": g.GEN_AI_USAGE_PROMPT_TOKENS,
        "COMPLETION_TOKENS": g.GEN_AI_USAGE_COMPLETION_TOKENS}
    operations = {v.value for v in g.GenAiOperationNameValues}
    assert {op.value for op in GenAIOperation} <= operations


def test_openinference_names_are_its_semantic_conventions():
    from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes

    assert {name: value for name, value in vars(OpenInferenceAttr).items()
            if name.isupper()} == {
        "SPAN_KIND": SpanAttributes.OPENINFERENCE_SPAN_KIND,
        "MODEL_NAME": SpanAttributes.LLM_MODEL_NAME,
        "INVOCATION_PARAMETERS": SpanAttributes.LLM_INVOCATION_PARAMETERS,
        "PROVIDER": SpanAttributes.LLM_PROVIDER, "SYSTEM": SpanAttributes.LLM_SYSTEM,
        "PROMPT_TOKENS": SpanAttributes.LLM_TOKEN_COUNT_PROMPT,
        "COMPLETION_TOKENS": SpanAttributes.LLM_TOKEN_COUNT_COMPLETION,
        "FINISH_REASON": SpanAttributes.LLM_FINISH_REASON,
        "SPAN_KIND_LLM": OpenInferenceSpanKindValues.LLM.value}


def _vllm_src() -> Path:
    root = os.environ.get("ROLLOUTSCOPE_VLLM_SRC")
    if not root:
        pytest.skip("ROLLOUTSCOPE_VLLM_SRC is not set (a vLLM checkout or unpacked wheel: "
                    "`pip download vllm --no-deps` and unzip it)")
    path = Path(root)
    if not (path / "vllm").is_dir():
        pytest.fail(f"ROLLOUTSCOPE_VLLM_SRC={root} holds no vllm/ package")
    return path / "vllm"


def _span_attributes(vllm: Path) -> dict[str, str]:
    """vLLM's ``SpanAttributes`` class: constant name -> attribute name."""
    for candidate in (vllm / "tracing" / "utils.py", vllm / "tracing.py",
                      vllm / "tracing" / "__init__.py"):
        if not candidate.exists():
            continue
        for node in ast.walk(ast.parse(candidate.read_text())):
            if isinstance(node, ast.ClassDef) and node.name == "SpanAttributes":
                return {t.id: stmt.value.value for stmt in node.body
                        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
                        for t in stmt.targets if isinstance(t, ast.Name)}
    pytest.fail(f"no SpanAttributes class under {vllm}/tracing")


def test_vllm_names_are_vllms_own():
    vllm = _vllm_src()
    constants = _span_attributes(vllm)
    by_value = {value: name for name, value in constants.items()}
    assert [name for name in VllmAttr.READ if name not in by_value] == []
    # the engine span is emitted under that name, as a SERVER span, with each attribute read
    emitters = [p for p in (vllm / "v1" / "engine" / "output_processor.py",
                            vllm / "engine" / "llm_engine.py") if p.exists()]
    text = "\n".join(p.read_text() for p in emitters)
    assert f'"{SpanName.VLLM_REQUEST}"' in text, emitters
    assert "SpanKind.SERVER" in text
    assert [name for name in VllmAttr.READ
            if f"SpanAttributes.{by_value[name]}" not in text] == []
    # the process id vLLM's tracer puts on its resource
    tracing = "\n".join(p.read_text() for p in [*vllm.glob("tracing/*.py"),
                                                 *vllm.glob("tracing.py")])
    assert f'"{VllmAttr.PROCESS_ID}"' in tracing
