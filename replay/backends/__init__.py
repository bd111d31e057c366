"""Generation backends for wall-clock replays: who serves each replayed model call.

``recorded`` (the default) keeps the captured timings and needs no engine: the virtual-clock
engine schedules each call's end itself. ``openai`` sends each call to an OpenAI-compatible server
(one URL per generation shard); ``transformers`` runs an in-process engine with a small random
model (``pip install 'rolloutscope[engine]'``). See ``base`` for the protocol.
"""

from __future__ import annotations

from collections.abc import Sequence

from rolloutscope.replay.backends.base import (
    ENGINE_EXTRA,
    BackendError,
    BackendInfo,
    EngineExtraMissing,
    EngineFailure,
    EngineHTTPError,
    EngineTimeout,
    EngineUnreachable,
    GenerationBackend,
    GenerationError,
    GenerationRequest,
    GenerationResult,
    GenerationSession,
)

BACKENDS = ("recorded", "openai", "transformers")
DEVICES = ("cuda", "cpu")

__all__ = [
    "BACKENDS", "DEVICES", "ENGINE_EXTRA", "BackendError", "BackendInfo", "EngineExtraMissing",
    "EngineFailure", "EngineHTTPError", "EngineTimeout", "EngineUnreachable", "GenerationBackend",
    "GenerationError", "GenerationRequest", "GenerationResult", "GenerationSession",
    "make_backend"]


def make_backend(name: str, *, urls: Sequence[str] = (), device: str | None = None,
                 request_timeout_s: float | None = None) -> GenerationBackend | None:
    """The named backend, not yet started; None for ``recorded`` (the captured timings)."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    if device is not None and device.split(":")[0] not in DEVICES:
        raise BackendError(f"unknown device {device!r}; known: {', '.join(DEVICES)}")
    if name == "recorded":
        if urls or device:
            raise BackendError("--backend-url and --device need --backend openai or "
                               "transformers")
        return None
    if name == "openai":
        if device:
            raise BackendError("--device is for the transformers backend; the openai backend's "
                               "device is its server's")
        from rolloutscope.replay.backends.openai import OpenAIBackend

        return OpenAIBackend(urls, request_timeout_s=request_timeout_s)
    if urls:
        raise BackendError("--backend-url is for the openai backend")
    from rolloutscope.replay.backends.transformers_engine import TransformersBackend

    return TransformersBackend(device=device)
