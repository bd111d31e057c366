"""The RL controller's stdout, one line at a time: prefix, timestamp, and which message it is.

Pure functions, no I/O. A line is ``[timestamp] [Ray prefix] message``; both prefixes are
optional and either may come first. The messages are the ``print(..., flush=True)`` lines of
NeMo-RL's single controller (docs/domain/telemetry.md#nemo-rl), each known by a distinctive
*head* (``gen_fleet: shard``, ``rollout stall --``, ``train step``, …) that may sit after any
prefix this module does not know (a logging format, a job launcher's tag).

The rule: strict where a line is recognised, tolerant of everything else. A line whose head
matches must match its whole grammar, or it is a ``Malformed`` line with the reason; a line with
no known head is ``None`` (unknown, counted by the caller, never fatal).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from rolloutscope.store.fit import INT32_MAX, INT64_MAX, time_problem
from rolloutscope.vocabulary import ShardState

# -- prefixes ------------------------------------------------------------------------------
# ISO 8601 (T or space; '.' or ',' before the fraction; Z or an offset), optionally bracketed.
_TIMESTAMP = re.compile(
    r"\[?(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<frac>\d{1,9}))?"
    r"(?P<tz>Z|[+-]\d{2}:?\d{2})?\]?(?:\s+-\s+|\s*\|\s*|\s+|$)")
# Ray's forwarded-output prefix: "(pid=1)", "(SingleControllerActor pid=1)", "(... pid=1, ip=…)"
_RAY = re.compile(r"\((?:[\w.:/-]+ )?pid=\d+(?:, ip=[\w.:-]+)?\)\s?")
# A logging level the format put between the timestamp and the message ("INFO - ", "[INFO] ").
# A bare "WARNING:" is left alone: it is part of the controller's own stall line.
_LEVEL = re.compile(r"(?:\[(?P<b>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]\s*|"
                    r"(?P<d>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+-\s+)")
# Ray's de-duplication suffix on a repeated line
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")


@dataclass(frozen=True, slots=True)
class Prefixed:
    """A line split into its timestamp (epoch ns, or None) and its message."""

    ts_ns: int | None
    message: str
    level: str | None = None  # the logging level a format put before the message


def split_prefix(line: str) -> Prefixed:
    """Strip the timestamp, Ray and level prefixes (in any order, each at most once).
    A timestamp without a zone is read as UTC."""
    rest = line.rstrip("\r\n")
    ts_ns = level = None
    for _ in range(3):
        if ts_ns is None and (m := _TIMESTAMP.match(rest)):
            parsed = _epoch_ns(m)
            if parsed is not None:
                ts_ns, rest = parsed, rest[m.end():]
                continue
        if m := _RAY.match(rest):
            rest = rest[m.end():]
            continue
        if level is None and (m := _LEVEL.match(rest)):
            level, rest = m.group("b") or m.group("d"), rest[m.end():]
            continue
        break
    return Prefixed(ts_ns, _RAY_REPEATED.sub("", rest), level)


def _epoch_ns(m: re.Match[str]) -> int | None:
    tz = m.group("tz") or "+00:00"
    if tz == "Z":
        tz = "+00:00"
    elif ":" not in tz:
        tz = tz[:3] + ":" + tz[3:]
    try:
        dt = datetime.fromisoformat(f"{m.group('date')}T{m.group('time')}{tz}")
    except ValueError:
        return None
    frac = (m.group("frac") or "").ljust(9, "0")
    return int(dt.timestamp()) * 10**9 + int(frac)


class TimeOutOfRange(ValueError):
    """An instant the store cannot hold (epoch ns past 2^63 - 1: after 2262-04-11)."""


def parse_iso8601(text: str) -> int:
    """Epoch ns of an ISO 8601 instant (``--start``); no zone means UTC. Raises ValueError
    (``TimeOutOfRange`` for an instant the store cannot hold)."""
    dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    ns = int(dt.replace(microsecond=0).timestamp()) * 10**9 + dt.microsecond * 1000
    problem = time_problem(ns, repr(text.strip()[:40]))
    if problem is not None:
        raise TimeOutOfRange(problem)
    return ns


# -- messages ------------------------------------------------------------------------------
_STATES = frozenset(s.value for s in ShardState)
_NUM = r"\d+(?:\.\d+)?"


@dataclass(frozen=True, slots=True)
class ShardTransition:
    shard: int
    previous: str | None  # None when the controller printed "none" (a shard's first record)
    state: str
    error: str | None  # "{ExcType}: {msg}", or None when it printed "None"


@dataclass(frozen=True, slots=True)
class Stall:
    idle_s: float
    inflight: int
    committed: int
    train_steps: int
    max_steps: int
    stall_timeout_s: float | None  # older controllers did not print it
    raised: bool  # "RolloutStall: …" (stall_action=abort) rather than the warning


@dataclass(frozen=True, slots=True)
class EnvHealth:
    env: str
    problem: str


@dataclass(frozen=True, slots=True)
class RowRedispatch:
    rows: int
    of: int
    attempt: int
    max_attempts: int


@dataclass(frozen=True, slots=True)
class PromptDropped:
    prompt_idx: int
    failures: int
    detail: str
    consecutive: int | None
    max_consecutive: int | None


@dataclass(frozen=True, slots=True)
class PromptSkipped:
    prompt_idx: int
    failures: int
    detail: str


@dataclass(frozen=True, slots=True)
class PromptSubstituted:
    target_step: int
    detail: str


@dataclass(frozen=True, slots=True)
class AbortedStale:
    rollouts: int


@dataclass(frozen=True, slots=True)
class SyncDone:
    seconds: float


@dataclass(frozen=True, slots=True)
class TrainStep:
    step: int
    max_steps: int
    trainer_version: int
    lag: float


@dataclass(frozen=True, slots=True)
class RolloutPumpStarting:
    pass


@dataclass(frozen=True, slots=True)
class RolloutPumpCompleted:
    epochs: int


@dataclass(frozen=True, slots=True)
class RouterListening:
    url: str


@dataclass(frozen=True, slots=True)
class RouterIgnoring:
    count: int
    urls: str


@dataclass(frozen=True, slots=True)
class ProbeRouterUpdateFailed:
    error: str


@dataclass(frozen=True, slots=True)
class RouterMetricsUnavailable:
    error: str


@dataclass(frozen=True, slots=True)
class GroupCleanupFailed:
    group_id: str
    error: str


@dataclass(frozen=True, slots=True)
class GymAckRetry:
    detail: str


@dataclass(frozen=True, slots=True)
class FleetExhausted:
    serving: int
    min_healthy_shards: int
    fleet_state: str


@dataclass(frozen=True, slots=True)
class Malformed:
    """A line whose head was recognised but whose rest does not fit the grammar."""

    kind: str
    reason: str


LogMessage = (ShardTransition | Stall | EnvHealth | RowRedispatch | PromptDropped | PromptSkipped
              | PromptSubstituted | AbortedStale | SyncDone | TrainStep | RolloutPumpStarting
              | RolloutPumpCompleted | RouterListening | RouterIgnoring | ProbeRouterUpdateFailed
              | RouterMetricsUnavailable | GroupCleanupFailed | GymAckRetry | FleetExhausted)


def _opt_error(text: str) -> str | None:
    return None if text in ("None", "") else text


def _shard(m: re.Match[str]) -> ShardTransition | Malformed:
    prev, new = m.group(2), m.group(3)
    for state in (prev, new):
        if state not in _STATES and not (state is prev and state == "none"):
            return Malformed("shard_transition", f"unknown shard state {state!r}")
    return ShardTransition(int(m.group(1)), None if prev == "none" else prev, new,
                           _opt_error(m.group(4)))


def _stall(m: re.Match[str]) -> Stall:
    timeout = m.group("timeout")
    return Stall(float(m.group("idle")), int(m.group("inflight")), int(m.group("committed")),
                 int(m.group("steps")), int(m.group("max")),
                 None if timeout is None else float(timeout), m.group("head") == "RolloutStall:")


def _dropped(m: re.Match[str]) -> PromptDropped:
    c, cmax = m.group(4), m.group(5)
    return PromptDropped(int(m.group(1)), int(m.group(2)), m.group(3),
                         None if c is None else int(c), None if cmax is None else int(cmax))


@dataclass(frozen=True, slots=True)
class _Grammar:
    kind: str
    head: re.Pattern[str]  # searched anywhere after the prefixes
    body: re.Pattern[str]  # must match from the head to the end of the line
    build: object  # match -> message (or Malformed)
    expected: str  # the format, quoted in the reason when the body does not match


def _g(kind: str, head: str, body: str, build, expected: str) -> _Grammar:
    return _Grammar(kind, re.compile(head), re.compile(body), build, expected)


GRAMMARS: tuple[_Grammar, ...] = (
    _g("shard_transition", r"gen_fleet: shard\b",
       r"gen_fleet: shard (\d+) ([a-z_]+) -> ([a-z_]+) \((.*)\)\s*$", _shard,
       "gen_fleet: shard {i} {prev} -> {new} ({err})"),
    _g("stall", r"(?:WARNING: rollout stall --|RolloutStall:)",
       rf"(?P<head>WARNING: rollout stall --|RolloutStall:) no rollout committed and no train "
       rf"step completed in (?P<idle>{_NUM})s \((?P<inflight>\d+) rollouts in flight, "
       rf"(?P<committed>\d+) groups committed, step (?P<steps>\d+)/(?P<max>\d+)"
       rf"(?:, stall_timeout_s=(?P<timeout>{_NUM}))?\)\s*$", _stall,
       "WARNING: rollout stall -- no rollout committed and no train step completed in {idle}s "
       "({n} rollouts in flight, {c} groups committed, step {s}/{max}[, stall_timeout_s={t}])"),
    _g("env_health", r"WARNING: environment health --",
       r"WARNING: environment health -- environment '([^']+)' ((?:did not answer its health "
       rf"check within {_NUM}s|reported unhealthy: .*))\s*$",
       lambda m: EnvHealth(m.group(1), m.group(2)),
       "WARNING: environment health -- environment 'X' did not answer its health check within "
       "{t}s | reported unhealthy: …"),
    _g("row_redispatch", r"NeMo-Gym: re-dispatching\b",
       r"NeMo-Gym: re-dispatching (\d+)/(\d+) row\(s\) \(attempt (\d+)/(\d+)\)\s*$",
       lambda m: RowRedispatch(*(int(m.group(i)) for i in range(1, 5))),
       "NeMo-Gym: re-dispatching {k}/{n} row(s) (attempt {a}/{max})"),
    _g("prompt_dropped", r"(?:^|\s)dropping prompt idx=",
       r"dropping prompt idx=(\d+) after (\d+) infrastructure failure\(s\) \((.*)\)"
       r"(?: \[consecutive drop (\d+)/(\d+)\])?\s*$", _dropped,
       "dropping prompt idx={i} after {n} infrastructure failure(s) ({last}) "
       "[consecutive drop {c}/{max}]"),
    _g("prompt_skipped", r"(?:^|\s)skipping prompt idx=",
       r"skipping prompt idx=(\d+) after (\d+) deterministic failure\(s\) \((.*)\)\s*$",
       lambda m: PromptSkipped(int(m.group(1)), int(m.group(2)), m.group(3)),
       "skipping prompt idx={i} after {n} deterministic failure(s) ({last})"),
    _g("prompt_substituted", r"(?:^|\s)target_step=\S*: substituting",
       r"target_step=(\d+): substituting a spare prompt\b\s*(.*?)\s*$",
       lambda m: PromptSubstituted(int(m.group(1)), m.group(2)),
       "target_step={s}: substituting a spare prompt …"),
    _g("aborted_stale", r"(?:^|\s)aborted \S+ stale in-flight",
       r"aborted (\d+) stale in-flight rollout\(s\)\s*$",
       lambda m: AbortedStale(int(m.group(1))), "aborted {n} stale in-flight rollout(s)"),
    _g("weight_sync_done", r"_sync_weights: sync done",
       rf"_sync_weights: sync done in ({_NUM})s\s*$", lambda m: SyncDone(float(m.group(1))),
       "_sync_weights: sync done in {t}s"),
    _g("train_step", r"(?:^|\s)train step \S+/",
       rf"train step (\d+)/(\d+)\s+trainer_v=(\d+)\s+lag=(-?{_NUM})\s*$",
       lambda m: TrainStep(int(m.group(1)), int(m.group(2)), int(m.group(3)),
                           float(m.group(4))),
       "train step {n}/{max}  trainer_v={v}  lag={lag}"),
    _g("rollout_pump_starting", r"rollout_pump: starting", r"rollout_pump: starting\s*$",
       lambda m: RolloutPumpStarting(), "rollout_pump: starting"),
    _g("rollout_pump_completed", r"rollout_pump: completed",
       r"rollout_pump: completed (\d+) epoch\(s\)\s*$",
       lambda m: RolloutPumpCompleted(int(m.group(1))), "rollout_pump: completed {n} epoch(s)"),
    _g("router_listening", r"policy router listening on",
       r"policy router listening on (\S+)\s*$", lambda m: RouterListening(m.group(1)),
       "policy router listening on {url}"),
    _g("router_ignoring", r"policy router: ignoring",
       r"policy router: ignoring (\d+) pushed URL\(s\) it does not serve: (.*?)\s*$",
       lambda m: RouterIgnoring(int(m.group(1)), m.group(2)),
       "policy router: ignoring {n} pushed URL(s) it does not serve: {urls}"),
    _g("probe_router_update_failed", r"fleet probe: router update failed",
       r"fleet probe: router update failed, retrying next tick: (.+?)\s*$",
       lambda m: ProbeRouterUpdateFailed(m.group(1)),
       "fleet probe: router update failed, retrying next tick: {err}"),
    _g("router_metrics_unavailable", r"watchdog: router metrics unavailable",
       r"watchdog: router metrics unavailable this tick: (.+?)\s*$",
       lambda m: RouterMetricsUnavailable(m.group(1)),
       "watchdog: router metrics unavailable this tick: {err}"),
    _g("group_cleanup_failed", r"warn: remove_group\(",
       r"warn: remove_group\(([^)]*)\) cleanup failed: (.+?)\s*$",
       lambda m: GroupCleanupFailed(m.group(1), m.group(2)),
       "warn: remove_group({group_id}) cleanup failed: {err}"),
    _g("gym_ack_retry", r"Gym completed-result acknowledgement will be retried",
       r"Gym completed-result acknowledgement will be retried before checkpoint preparation: "
       r"(.+?)\s*$", lambda m: GymAckRetry(m.group(1)),
       "Gym completed-result acknowledgement will be retried before checkpoint preparation: …"),
    _g("fleet_exhausted", r"GenerationFleetExhausted: only",
       r"GenerationFleetExhausted: only (\d+) generation shard\(s\) serving, below "
       r"min_healthy_shards=(\d+); fleet state is (.+?)\s*$",
       lambda m: FleetExhausted(int(m.group(1)), int(m.group(2)), m.group(3)),
       "GenerationFleetExhausted: only {n} generation shard(s) serving, below "
       "min_healthy_shards={m}; fleet state is {…}"),
)


@dataclass(frozen=True, slots=True)
class Recognised:
    kind: str
    message: LogMessage | Malformed


def recognise(message: str) -> Recognised | None:
    """Which controller message ``message`` is (after its prefixes), or None if unknown."""
    for grammar in GRAMMARS:
        head = grammar.head.search(message)
        if head is None:
            continue
        matched = head.group(0)
        body = grammar.body.match(message, head.start() + len(matched) - len(matched.lstrip()))
        if body is None:
            return Recognised(grammar.kind,
                              Malformed(grammar.kind, f"expected '{grammar.expected}'"))
        built = grammar.build(body)
        if not isinstance(built, Malformed):
            problem = _out_of_range(built)
            if problem is not None:
                built = Malformed(grammar.kind, problem)
        return Recognised(grammar.kind, built)
    return None


MAX_SECONDS = 1e9  # about 31.7 years: no duration a controller prints is longer
_INTEGER_FIELDS = frozenset({"shard"})  # INTEGER columns; every other count is a BIGINT


def _out_of_range(message: LogMessage) -> str | None:
    """Why a number the line states cannot be stored (or placed in time), or None: the grammar
    reads any run of digits, the store's columns do not hold any."""
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            limit = INT32_MAX if f.name in _INTEGER_FIELDS else INT64_MAX
            if value > limit:
                return f"{f.name} {value} is out of range (at most {limit})"
        elif isinstance(value, float) and not abs(value) <= MAX_SECONDS:
            return f"{f.name} {value:g} is out of range (at most {MAX_SECONDS:g})"
    return None


def split_error(error: str | None) -> tuple[str | None, str | None]:
    """``"ActorDiedError: the actor died"`` → (``ActorDiedError``, the message)."""
    if not error:
        return None, None
    m = re.match(r"([A-Za-z_][\w.]*(?:Error|Exception|Exhausted|Unavailable|Timeout|Failure|"
                 r"Interrupt|Died|Lost|Full))(?::\s*(.*))?$", error, re.DOTALL)
    if m is None:
        return None, error
    return m.group(1), m.group(2) or None
