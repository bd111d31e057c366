"""The generation-backend protocol: how a wall-clock replay has its model calls served for real.

A backend takes one ``GenerationRequest`` per replayed policy call (the captured prompt's and
completion's token counts, forced to that length where the engine allows it), serves it on its
own threads, and reports back through two callbacks: the first token (streaming calls) and a
``GenerationResult`` with the real latency, the tokens the engine counted and, for a failed call,
a typed ``GenerationError`` (unreachable, HTTP status, timeout, engine failure). The engine's
thread never waits on a backend: ``GenerationSession`` posts each report into the engine's
``Inbox``, where the paced driver turns it into an event at the virtual time the wall clock has
reached, and the simulated Gym or router sees it exactly as it sees a live answer, so a failure
takes the same path into the failure taxonomy as in a live run.

Backends are named: ``recorded`` (the captured timings, no engine), ``openai`` (an
OpenAI-compatible server per shard) and ``transformers`` (an in-process engine).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rolloutscope.replay.errors import ReplayError

if TYPE_CHECKING:
    from rolloutscope.replay.event_engine import Inbox, Scheduler
    from rolloutscope.replay.scenario import Turn

ENGINE_EXTRA = "rolloutscope[engine]"


# -- errors ---------------------------------------------------------------------------------------
class BackendError(ReplayError):
    """A generation backend could not be set up (bad options, missing extra, no server)."""


class EngineExtraMissing(BackendError):
    def __init__(self, backend: str, missing: str) -> None:
        self.backend = backend
        self.missing = missing
        super().__init__(f"the {backend} backend needs {missing}, which is not installed: "
                         f"pip install '{ENGINE_EXTRA}'")


class GenerationError(Exception):
    """Why one real call failed; carried in its result (failures are data, not raised)."""

    status: int = 500


class EngineUnreachable(GenerationError):
    """No connection to the shard's engine (refused, reset before an answer, or killed by the
    replay's driver)."""

    status = 502


class EngineHTTPError(GenerationError):
    """The engine answered with an error status."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {detail}")


class EngineTimeout(GenerationError):
    """No answer within the backend's own request timeout."""

    status = 504


class EngineFailure(GenerationError):
    """The in-process engine raised while generating (out of memory, a kernel error, ...)."""


# -- requests and results -------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class GenerationRequest:
    call_id: str
    shard: int | None  # the generation shard (None: a scenario without a fleet)
    input_tokens: int
    output_tokens: int
    stream: bool
    captured_s: float  # the call's captured duration (virtual seconds)

    @property
    def kind(self) -> str:
        """The call kind the report groups latencies by: the forced shape of the call."""
        return (f"{self.input_tokens}->{self.output_tokens} tok"
                + (" stream" if self.stream else ""))


@dataclass(frozen=True, kw_only=True)
class GenerationResult:
    request: GenerationRequest
    latency_s: float  # wall seconds from submit to the last token (or the failure)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_token_s: float | None = None
    error: GenerationError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, kw_only=True)
class BackendInfo:
    """What the replay's run records about the engine that served it."""

    backend: str
    device: str | None = None
    engine: Mapping[str, str] = field(default_factory=dict)  # package -> version
    model: str | None = None
    endpoints: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "device": self.device, "engine": dict(self.engine),
                "model": self.model, "endpoints": list(self.endpoints)}


class CallHandle(Protocol):
    def cancel(self) -> None: ...


OnFirstToken = Callable[[float], None]  # wall seconds since submit
OnResult = Callable[[GenerationResult], None]


class GenerationBackend(Protocol):
    """Serves generation requests on its own threads; every method is called from the engine's
    thread, the callbacks come from the backend's."""

    name: str

    def start(self) -> BackendInfo: ...

    def submit(self, request: GenerationRequest, on_first_token: OnFirstToken,
               on_result: OnResult) -> CallHandle: ...

    def set_reachable(self, shard: int, reachable: bool) -> None: ...

    def close(self) -> None: ...


# -- prompts ----------------------------------------------------------------------------------------
# common English words that most BPE vocabularies hold as one token each (with a leading space),
# so N words make a prompt of about N tokens on any engine; each call draws its own sequence, so
# no two calls share a prefix an engine's cache could reuse
PROMPT_WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "out", "up", "into", "than",
    "them", "some", "could", "time", "these", "two", "may", "then", "do", "first", "any", "my")


def prompt_text(call_id: str, tokens: int) -> str:
    rng = random.Random(f"rolloutscope-prompt-{call_id}")
    return " ".join(rng.choices(PROMPT_WORDS, k=max(tokens, 1)))


# -- the engine-side session ------------------------------------------------------------------------
class PendingCall:
    """One real call as the simulated world holds it; ``cancel`` drops its answer."""

    __slots__ = ("request", "handle", "submitted_v", "cancelled", "on_first_token", "on_done")

    def __init__(self, request: GenerationRequest, submitted_v: float,
                 on_first_token: Callable[[], None] | None,
                 on_done: Callable[[GenerationResult, float], None]) -> None:
        self.request = request
        self.submitted_v = submitted_v
        self.handle: CallHandle | None = None
        self.cancelled = False
        self.on_first_token = on_first_token
        self.on_done = on_done


@dataclass
class _KindStats:
    captured_s: list[float] = field(default_factory=list)
    real_s: list[float] = field(default_factory=list)
    replayed_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    asked_tokens: int = 0
    short: int = 0
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile ``q`` (0-100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class GenerationSession:
    """The simulated world's handle on a backend during one wall-clock replay.

    ``submit`` (engine thread) hands a request to the backend; the backend's callbacks are posted
    to the inbox and run back on the engine thread, where a cancelled call's answer is dropped and
    the rest reach ``on_done(result, virtual_latency_s)``. It also keeps the per-kind numbers the
    run records: captured, real (wall) and replayed (virtual) latencies, tokens and errors.
    """

    def __init__(self, backend: GenerationBackend, *, inbox: Inbox, sched: Scheduler,
                 speed: float, info: BackendInfo) -> None:
        self.backend = backend
        self.inbox = inbox
        self.sched = sched
        self.speed = speed
        self.info = info
        self.wall_s = 0.0  # set by the runner: how long the replay took
        self._kinds: dict[str, _KindStats] = defaultdict(_KindStats)
        self.submitted = 0
        self.cancelled = 0

    def submit(self, *, call_id: str, turn: Turn, shard: int | None,
               on_done: Callable[[GenerationResult, float], None],
               on_first_token: Callable[[], None] | None = None,
               captured_s: float | None = None) -> PendingCall:
        request = GenerationRequest(
            call_id=call_id, shard=shard, input_tokens=turn.input_tokens,
            output_tokens=turn.output_tokens, stream=turn.streaming,
            captured_s=turn.model_s if captured_s is None else captured_s)
        pending = PendingCall(request, self.sched.now, on_first_token, on_done)
        self.inbox.opened()
        self.submitted += 1
        pending.handle = self.backend.submit(
            request, lambda _s: self.inbox.post(self._first_token, pending),
            lambda result: self.inbox.post(self._done, pending, result))
        return pending

    def cancel(self, pending: PendingCall) -> None:
        if pending.cancelled:
            return
        pending.cancelled = True
        self.cancelled += 1
        self.inbox.closed()
        if pending.handle is not None:
            pending.handle.cancel()

    def set_reachable(self, shard: int, reachable: bool) -> None:
        self.backend.set_reachable(shard, reachable)

    def _first_token(self, pending: PendingCall) -> None:
        if not pending.cancelled and pending.on_first_token is not None:
            pending.on_first_token()

    def _done(self, pending: PendingCall, result: GenerationResult) -> None:
        if pending.cancelled:
            return
        pending.cancelled = True  # answered: a later cancel is a no-op
        self.inbox.closed()
        virtual_s = self.sched.now - pending.submitted_v
        self._record(result, virtual_s)
        pending.on_done(result, virtual_s)

    def _record(self, result: GenerationResult, virtual_s: float) -> None:
        req = result.request
        k = self._kinds[req.kind]
        if result.error is not None:
            k.errors[type(result.error).__name__] += 1
            return
        k.captured_s.append(req.captured_s)
        k.real_s.append(result.latency_s)
        k.replayed_s.append(virtual_s)
        k.prompt_tokens += result.prompt_tokens
        k.completion_tokens += result.completion_tokens
        k.asked_tokens += req.output_tokens
        if result.completion_tokens < req.output_tokens:
            k.short += 1

    def summary(self) -> dict[str, Any]:
        """What ``runs.metadata['generation']`` holds (see ``compare.latency_rows``)."""
        kinds: dict[str, Any] = {}
        completion = 0
        for name in sorted(self._kinds):
            k = self._kinds[name]
            completion += k.completion_tokens
            kinds[name] = {
                "calls": len(k.real_s), "errors": dict(sorted(k.errors.items())),
                "captured_p50_s": percentile(k.captured_s, 50),
                "captured_p99_s": percentile(k.captured_s, 99),
                "real_p50_s": percentile(k.real_s, 50), "real_p99_s": percentile(k.real_s, 99),
                "replayed_p50_s": percentile(k.replayed_s, 50),
                "replayed_p99_s": percentile(k.replayed_s, 99),
                "prompt_tokens": k.prompt_tokens, "completion_tokens": k.completion_tokens,
                "asked_completion_tokens": k.asked_tokens, "short_completions": k.short}
        return {**self.info.as_dict(), "speed": self.speed, "wall_s": round(self.wall_s, 3),
                "submitted": self.submitted, "cancelled": self.cancelled,
                "completion_tokens": completion,
                "tokens_per_s": round(completion / self.wall_s, 1) if self.wall_s > 0 else None,
                "kinds": kinds}
