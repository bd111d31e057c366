"""Generation fleet health: which dp shards may serve, and why (NVIDIA-NeMo/RL #3590;
docs/domain/fleet-health.md).

A pure state machine. It holds no handle, no network and not its own clock: the replay engine
feeds it observations (probe results, failures reported by the generation path and drained from
the router, restarts, loads, refits) and reads its verdicts (the serving set, the membership
epoch, exhaustion). Every state change goes through ``_transition``, which is the one place the
membership epoch moves and the one place an observer hears about it; the model itself emits no
span, event or log line.

The design rule is that the serving set is exactly the shards in ``healthy`` or ``suspect``, and
that a shard which has left it comes back only through a completed refit. The transition that
must never exist is ``dead -> healthy``: a restarted engine answers probes with whatever weights
it loaded at start, so re-admitting it on a good probe would feed training rollouts from a stale
checkpoint. Recovery goes ``dead -> restarting -> stale -> healthy`` and only ``report_refit``
takes the last step. ``dead``, ``restarting``, ``stale`` and ``retired`` ignore probe results and
reported failures alike, and ``retired`` is terminal.

Probe failures and reported failures keep separate streaks. A wedged engine answers ``is_alive``
from a healthy worker process while failing every generation; were one streak shared, each good
probe would wipe the evidence and the shard would swing healthy <-> suspect for ever. Only a
successful generation (``report_success``) or a refit clears the reported streak.
``FleetHealthConfig.separate_reported_failure_streak=False`` reproduces that pre-fix behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from rolloutscope.clock import TimeFn
from rolloutscope.config import ConfigProblem, build, check_bounds, check_types, setting
from rolloutscope.vocabulary import SERVING_STATES, ShardState, ShardTrigger

TransitionObserver = Callable[["Transition"], None]

# The one edge the module docstring forbids; _transition refuses it even if a future operation
# asked for it, so a bug shows up as an exception rather than as stale weights in training data.
_FORBIDDEN_EDGES = frozenset({(ShardState.DEAD, ShardState.HEALTHY)})
# A refit reaches only shards that are serving or loaded and waiting for weights. A dead or
# restarting shard cannot take part in a weight broadcast, so a refit reported for one is ignored.
_REFIT_ACCEPTED_FROM = frozenset({ShardState.HEALTHY, ShardState.SUSPECT, ShardState.STALE})


# -- configuration ------------------------------------------------------------------------------


class FleetHealthConfigError(ValueError):
    """A fleet-health config that would misbehave; ``key`` names the offending key when one does."""

    def __init__(self, message: str, *, key: str | None = None,
                 detail: str | None = None) -> None:
        self.key = key
        self.detail = detail or message  # what is wrong, without the key's name
        super().__init__(message)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetHealthConfig:
    """``async_rl.generation_fleet_health`` (docs/domain/fleet-health.md#config), plus one replay
    variant switch.

    Defaults are the real ones. With them a dead shard is condemned after three failed probes,
    about 15 s. ``selection`` and ``on_dead_shard`` accept one value each, as in the real config,
    so a mode that nothing implements is refused rather than silently ignored.
    """

    enabled: bool = False
    probe_interval_s: float = setting(5.0, gt=0)
    probe_timeout_s: float = 2.0
    unhealthy_threshold: int = setting(3, ge=1)
    healthy_threshold: int = setting(2, ge=1)
    selection: str = setting("least_outstanding", one_of=("least_outstanding",))
    on_dead_shard: str = setting("fail_fast", one_of=("fail_fast",))
    max_restart_attempts_per_shard: int = setting(5, ge=0)
    min_healthy_shards: int = setting(1, ge=0)
    # Replay variant, not a real key: False shares one streak between probes and reported
    # failures, as before the fix, so a wedged engine oscillates healthy <-> suspect for ever.
    separate_reported_failure_streak: bool = True

    def __post_init__(self) -> None:
        # ints are accepted where a float is expected; bools never count as numbers
        check_types(self, fail=_refused)
        check_bounds(self, fail=_refused)
        if not 0 < self.probe_timeout_s < self.probe_interval_s:
            # A probe that may outlive its interval overlaps the next round, and the probe loop
            # would fall further behind every tick.
            raise FleetHealthConfigError(
                f"probe_timeout_s={self.probe_timeout_s} must be > 0 and < probe_interval_s="
                f"{self.probe_interval_s}", key="probe_timeout_s")

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> FleetHealthConfig:
        """Build from a config block, refusing keys it does not know (a typo would otherwise
        leave a default silently in force)."""
        return build(cls, mapping, path="generation_fleet_health", fail=_refused)


def _refused(problem: ConfigProblem) -> FleetHealthConfigError:
    return FleetHealthConfigError(problem.message, key=problem.key, detail=problem.detail)


# -- records handed out -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardHealth:
    """One shard as the model sees it; a copy, never the model's own state."""

    dp_shard_idx: int
    base_url: str | None
    state: ShardState
    consecutive_probe_failures: int
    consecutive_probe_successes: int
    consecutive_reported_failures: int
    restart_attempts: int
    weight_version: int | None
    last_ok_at: float | None
    last_error: str | None

    @property
    def serving(self) -> bool:
        return self.state in SERVING_STATES


@dataclass(frozen=True, slots=True)
class Transition:
    """One state change, as the observer hears it.

    The engine turns each into an ``rl.gen_fleet.transition`` event and closes/opens the shard's
    ``rl.gen_fleet.shard_state`` span. ``previous_state`` is None only for the ``initial``
    record each shard gets when the model is built. ``membership_epoch`` is the epoch after the
    change; the counters are the shard's after the change too.
    """

    shard: int
    base_url: str | None
    previous_state: ShardState | None
    state: ShardState
    trigger: ShardTrigger
    membership_epoch: int
    probe_failures: int
    reported_failures: int
    restart_attempts: int
    weight_version: int | None
    last_error: str | None
    at: float

    @property
    def serving_changed(self) -> bool:
        return (self.previous_state in SERVING_STATES) != (self.state in SERVING_STATES)

    def log_line(self) -> str:
        """The controller's own line for this transition
        (docs/domain/fleet-health.md#transitions)."""
        previous = self.previous_state.value if self.previous_state else "none"
        return f"gen_fleet: shard {self.shard} {previous} -> {self.state.value} ({self.last_error})"


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """The whole fleet at one instant."""

    at: float
    membership_epoch: int
    min_healthy_shards: int
    shards: tuple[ShardHealth, ...]

    @property
    def serving_shards(self) -> tuple[int, ...]:
        return tuple(s.dp_shard_idx for s in self.shards if s.serving)

    @property
    def counts(self) -> Mapping[ShardState, int]:
        """Shards per state, every state present (the ``gen_fleet/shards/{state}`` gauges)."""
        tally = dict.fromkeys(ShardState, 0)
        for shard in self.shards:
            tally[shard.state] += 1
        return MappingProxyType(tally)


# -- errors -------------------------------------------------------------------------------------


class GenerationFleetExhausted(RuntimeError):
    """Fewer shards serve than ``min_healthy_shards``: the run is no longer worth continuing."""

    def __init__(self, *, serving: int, min_healthy_shards: int,
                 counts: Mapping[ShardState, int]) -> None:
        self.serving = serving
        self.min_healthy_shards = min_healthy_shards
        self.counts = {state.value: n for state, n in counts.items()}
        super().__init__(
            f"only {serving} generation shard(s) serving, below min_healthy_shards="
            f"{min_healthy_shards}; fleet state is {self.counts}")


class UnknownShardError(LookupError):
    """An operation named a shard index the fleet does not have (a caller bug)."""


class IllegalTransitionError(RuntimeError):
    """The model was asked for an edge its design forbids (a bug in this module)."""


# -- the model ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Shard:
    idx: int
    base_url: str | None
    state: ShardState = ShardState.HEALTHY
    probe_failures: int = 0
    probe_successes: int = 0
    reported_failures: int = 0
    restart_attempts: int = 0
    weight_version: int | None = None
    last_ok_at: float | None = None
    last_error: str | None = None

    @property
    def serving(self) -> bool:
        return self.state in SERVING_STATES

    def frozen(self) -> ShardHealth:
        return ShardHealth(self.idx, self.base_url, self.state, self.probe_failures,
                           self.probe_successes, self.reported_failures, self.restart_attempts,
                           self.weight_version, self.last_ok_at, self.last_error)


class GenerationFleetHealth:
    """The fleet's health model. Operation names and meanings are the real system's, so the real
    implementation can stand in for this one behind an adapter."""

    def __init__(self, *, num_shards: int, config: FleetHealthConfig, clock: TimeFn,
                 base_urls: Sequence[str] | None = None,
                 observer: TransitionObserver | None = None) -> None:
        if num_shards < 1:
            raise ValueError(f"a fleet needs at least one shard, got num_shards={num_shards}")
        if base_urls is not None and len(base_urls) != num_shards:
            raise ValueError(f"base_urls has {len(base_urls)} entries for {num_shards} shards")
        if config.min_healthy_shards > num_shards:
            raise FleetHealthConfigError(
                f"min_healthy_shards={config.min_healthy_shards} exceeds the {num_shards} "
                f"shard(s) in the fleet, so it would be exhausted before the first probe",
                key="min_healthy_shards")
        self._config = config
        self._clock = clock
        self._observer = observer
        self._epoch = 0
        urls = base_urls if base_urls is not None else [None] * num_shards
        self._shards = [_Shard(idx, url) for idx, url in enumerate(urls)]
        self._by_url = {url: idx for idx, url in enumerate(urls) if url is not None}
        for shard in self._shards:
            self._notify(shard, None, ShardTrigger.INITIAL)

    # -- readers

    @property
    def config(self) -> FleetHealthConfig:
        return self._config

    @property
    def membership_epoch(self) -> int:
        """Moves by one each time the serving set changes, and at no other time."""
        return self._epoch

    def serving_shards(self) -> tuple[int, ...]:
        return tuple(s.idx for s in self._shards if s.serving)

    def serving_base_urls(self) -> tuple[str, ...]:
        """The serving set as the router's membership push carries it."""
        return tuple(s.base_url for s in self._shards if s.serving and s.base_url is not None)

    def shard(self, idx: int) -> ShardHealth:
        return self._shard(idx).frozen()

    def shard_for_base_url(self, url: str) -> int | None:
        return self._by_url.get(url)

    def snapshot(self) -> FleetSnapshot:
        return FleetSnapshot(self._clock(), self._epoch, self._config.min_healthy_shards,
                             tuple(s.frozen() for s in self._shards))

    def raise_if_exhausted(self) -> None:
        serving = len(self.serving_shards())
        if serving < self._config.min_healthy_shards:
            snap = self.snapshot()
            raise GenerationFleetExhausted(serving=serving,
                                           min_healthy_shards=self._config.min_healthy_shards,
                                           counts=snap.counts)

    # -- observers write: probes and the generation path

    def record_probe(self, idx: int, ok: bool, error: BaseException | str | None = None) -> None:
        """Fold one liveness probe in. Ignored unless the shard is serving: a quarantined shard
        answering again says nothing about whether its weights are current."""
        shard = self._shard(idx)
        if not shard.serving:
            return
        if ok:
            shard.probe_failures = 0
            shard.probe_successes += 1
            shard.last_ok_at = self._clock()
            if (shard.state is ShardState.SUSPECT
                    and shard.probe_successes >= self._config.healthy_threshold):
                self._transition(shard, ShardState.HEALTHY, ShardTrigger.PROBE_SUCCESS)
            return
        shard.probe_failures += 1
        shard.probe_successes = 0
        shard.last_error = _describe(error)
        self._after_failure(shard, ShardTrigger.PROBE_FAILURE)

    def report_failure(self, idx: int, error: BaseException | str | None = None) -> None:
        """A generation on this shard failed (native path, or drained from the router)."""
        shard = self._shard(idx)
        if not shard.serving:
            return
        if self._config.separate_reported_failure_streak:
            shard.reported_failures += 1
        else:
            # Pre-fix: the failure lands in the probe streak, which the next good probe zeroes.
            shard.probe_failures += 1
        # Recovery needs healthy_threshold good probes after the latest failure of either kind;
        # otherwise successes banked before the failure would re-admit a suspect on one probe.
        shard.probe_successes = 0
        shard.last_error = _describe(error)
        self._after_failure(shard, ShardTrigger.REPORTED_FAILURE)

    def report_success(self, idx: int) -> None:
        """A generation on this shard completed. Clears the reported streak; never a transition
        (suspect -> healthy is the probes' decision)."""
        shard = self._shard(idx)
        if shard.serving:
            shard.reported_failures = 0

    # -- the recovery path

    def mark_restarting(self, idx: int) -> None:
        """A replacement engine is being started. Past the restart budget the shard retires."""
        shard = self._shard(idx)
        if shard.state is ShardState.RETIRED:
            return
        shard.restart_attempts += 1
        if shard.restart_attempts > self._config.max_restart_attempts_per_shard:
            shard.last_error = "restart attempts exhausted"
            self._transition(shard, ShardState.RETIRED, ShardTrigger.RETIRE)
        elif shard.state is not ShardState.RESTARTING:
            self._transition(shard, ShardState.RESTARTING, ShardTrigger.RESTART)

    def mark_loaded(self, idx: int) -> None:
        """The replacement finished loading: it answers, but with its start-up weights."""
        shard = self._shard(idx)
        if shard.state not in (ShardState.RETIRED, ShardState.STALE):
            self._transition(shard, ShardState.STALE, ShardTrigger.LOADED)

    def report_refit(self, idx: int, weight_version: int) -> None:
        """A weight sync reached this shard: its weights are current, every streak starts over.
        The only way back into service."""
        shard = self._shard(idx)
        if shard.state not in _REFIT_ACCEPTED_FROM:
            return
        shard.weight_version = weight_version
        shard.probe_failures = shard.probe_successes = shard.reported_failures = 0
        if shard.state is not ShardState.HEALTHY:
            self._transition(shard, ShardState.HEALTHY, ShardTrigger.REFIT)

    def retire(self, idx: int, reason: str) -> None:
        """Take the shard out for good."""
        shard = self._shard(idx)
        if shard.state is not ShardState.RETIRED:
            shard.last_error = reason
            self._transition(shard, ShardState.RETIRED, ShardTrigger.RETIRE)

    # -- internals

    def _after_failure(self, shard: _Shard, trigger: ShardTrigger) -> None:
        threshold = self._config.unhealthy_threshold
        # Either streak condemns. A reported streak carried over from an earlier suspect spell
        # can take a healthy shard straight to dead.
        if max(shard.probe_failures, shard.reported_failures) >= threshold:
            self._transition(shard, ShardState.DEAD, trigger)
        elif shard.state is ShardState.HEALTHY:
            self._transition(shard, ShardState.SUSPECT, trigger)

    def _transition(self, shard: _Shard, to: ShardState, trigger: ShardTrigger) -> None:
        previous = shard.state
        if (previous, to) in _FORBIDDEN_EDGES or previous is ShardState.RETIRED:
            raise IllegalTransitionError(
                f"shard {shard.idx}: {previous.value} -> {to.value} ({trigger.value}) is forbidden")
        shard.state = to
        if (previous in SERVING_STATES) != (to in SERVING_STATES):
            self._epoch += 1
        self._notify(shard, previous, trigger)

    def _notify(self, shard: _Shard, previous: ShardState | None, trigger: ShardTrigger) -> None:
        if self._observer is None:
            return
        self._observer(Transition(
            shard=shard.idx, base_url=shard.base_url, previous_state=previous,
            state=shard.state, trigger=trigger, membership_epoch=self._epoch,
            probe_failures=shard.probe_failures, reported_failures=shard.reported_failures,
            restart_attempts=shard.restart_attempts, weight_version=shard.weight_version,
            last_error=shard.last_error, at=self._clock()))

    def _shard(self, idx: int) -> _Shard:
        if not 0 <= idx < len(self._shards):
            raise UnknownShardError(f"no shard {idx}; the fleet has {len(self._shards)}")
        return self._shards[idx]


def report_router_failures(fleet: GenerationFleetHealth,
                           failures: Mapping[str, int]) -> tuple[str, ...]:
    """Fold one probe tick's drained router failure counts into the fleet, one
    ``report_failure`` per failed request, as the controller's ``_drain_router_failures`` does.

    Returns the URLs that belong to no shard, for the caller to report.
    """
    unmatched: list[str] = []
    for url, count in failures.items():
        idx = fleet.shard_for_base_url(url)
        if idx is None:
            unmatched.append(url)
            continue
        error = RuntimeError(f"router: {count} failed request(s) to {url}")
        for _ in range(count):
            fleet.report_failure(idx, error)
    return tuple(unmatched)


def _describe(error: BaseException | str | None) -> str | None:
    if error is None or isinstance(error, str):
        return error
    return f"{type(error).__name__}: {error}"


__all__ = [
    "FleetHealthConfig", "FleetHealthConfigError", "FleetSnapshot", "GenerationFleetExhausted",
    "GenerationFleetHealth", "IllegalTransitionError", "ShardHealth", "Transition",
    "TransitionObserver", "UnknownShardError", "report_router_failures",
]
