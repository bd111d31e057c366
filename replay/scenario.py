"""Scenarios: a versioned, JSON-serialisable, validated description of a run to replay.

A scenario is config (timeouts, budgets, watchdog, checkpoint), a workload (prompts arriving at
times, each a group of rows, each row a sequence of turns with model-call and tool timings and
token counts), a control schedule (snapshot attempts, weight syncs), faults, a horizon and a
seed. ``Scenario.from_dict`` refuses unknown keys, naming the key and where it was found, so a
misspelt threshold never silently falls back to its default. Every class is a frozen, keyword-only
dataclass; ``to_dict`` / ``from_dict`` round-trip exactly. Reading a document and the bounds each
field declares (``setting``) go through ``rolloutscope.config``; what relates several fields is
checked here.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any

import numpy as np

from rolloutscope.config import ConfigProblem, build, check_bounds, setting
from rolloutscope.vocabulary import StallAction
from rolloutscope.replay.errors import ScenarioError
from rolloutscope.replay.participants.fleet_health import FleetHealthConfig, FleetHealthConfigError
from rolloutscope.replay.participants.router import RouterConfig, RouterConfigError
from rolloutscope.replay.variants import Variant

SCHEMA_VERSION = 1


# -- config -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RolloutConfig:
    """``async_rl.rollout_failure`` for the Gym path
    (docs/domain/rollouts-and-deadlines.md#budgets)."""

    # one deadline per RL try over the whole row stream
    rollout_timeout_s: float | None = setting(None, gt=0)
    generation_timeout_s: float | None = setting(None, gt=0)  # native path; for the stall check
    env_timeout_s: float | None = setting(None, gt=0)  # native path; for the stall check
    num_generations_per_prompt: int = setting(1, ge=1)
    max_row_attempts: int = setting(3, ge=1)
    max_infra_attempts_per_prompt: int = setting(5, ge=1)
    max_data_attempts_per_prompt: int = setting(2, ge=1)
    backoff_base_s: float = 1.0
    max_backoff_s: float = 30.0
    max_skipped_prompts: int = 0
    max_consecutive_dropped_prompts: int = 0


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """Gym ``checkpoint:`` block and RL ``rollout_checkpointing.gym``
    (docs/domain/checkpoint-protocol.md#timeouts-and-config)."""

    prepare_timeout_s: float = setting(300.0, gt=0)
    lease_grace_s: float = setting(600.0, gt=0)
    generation_cuts: bool = False
    policy_workers: int = setting(1, ge=1)


@dataclass(frozen=True, kw_only=True)
class WatchdogConfig:
    """``async_rl.stall_watchdog`` (docs/domain/rollouts-and-deadlines.md#stall-watchdog)."""

    interval_s: float = setting(30.0, gt=0)
    stall_timeout_s: float = 600.0
    stall_action: StallAction = StallAction.WARN
    gym_subprocess_check: bool = True


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """How committed prompt groups become train steps (progress for the stall watchdog)."""

    prompts_per_step: int = setting(1, ge=1)
    train_step_s: float = setting(10.0, ge=0)
    max_num_steps: int = setting(1, ge=0)


@dataclass(frozen=True, kw_only=True)
class FleetConfig:
    """The generation fleet and ``async_rl.generation_fleet_health``
    (docs/domain/fleet-health.md#config).

    ``shards=0`` models no fleet: a policy call simply takes its turn's time (the part-1
    scenarios). Whether fleet health and its router are on is a variant
    (``fleet-health-enabled``), not a key, so one scenario replays with and without it.
    """

    shards: int = setting(0, ge=0)
    probe_interval_s: float = 5.0
    probe_timeout_s: float = 2.0
    unhealthy_threshold: int = 3
    healthy_threshold: int = 2
    max_restart_attempts_per_shard: int = 5
    min_healthy_shards: int = 1

    def health_config(self, *, separate_reported_failure_streak: bool) -> FleetHealthConfig:
        return FleetHealthConfig(
            enabled=True, probe_interval_s=self.probe_interval_s,
            probe_timeout_s=self.probe_timeout_s, unhealthy_threshold=self.unhealthy_threshold,
            healthy_threshold=self.healthy_threshold,
            max_restart_attempts_per_shard=self.max_restart_attempts_per_shard,
            min_healthy_shards=self.min_healthy_shards,
            separate_reported_failure_streak=separate_reported_failure_streak)


@dataclass(frozen=True, kw_only=True)
class GenerationRouterConfig:
    """``async_rl.generation_router`` (docs/domain/fleet-health.md#router); on with fleet health."""

    backend_timeout_s: float = 600.0
    connect_timeout_s: float = 5.0
    no_healthy_backend_status: int = 409

    def router_config(self, *, router_500_not_504: bool) -> RouterConfig:
        return RouterConfig(enabled=True, backend_timeout_s=self.backend_timeout_s,
                            connect_timeout_s=self.connect_timeout_s,
                            no_healthy_backend_status=self.no_healthy_backend_status,
                            router_500_not_504=router_500_not_504)


@dataclass(frozen=True, kw_only=True)
class Config:
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    router: GenerationRouterConfig = field(default_factory=GenerationRouterConfig)


# -- workload -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class Turn:
    """One agent turn: a policy model call, then a tool/environment step; a boundary follows.

    Slotted: a large workload holds a hundred thousand of them, and the replay reads one on
    every step of a run."""

    model_s: float = setting(ge=0)
    tool_s: float = setting(0.0, ge=0)
    # a streaming response starts (first data chunk) first_chunk_s into the call; a non-streaming
    # one (Gym pins stream=false) starts only when the generation finishes
    streaming: bool = False
    first_chunk_s: float = setting(0.0, ge=0)
    constrained: bool = False  # constrained decoding: never cut (cut_skipped)
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class Row:
    turns: tuple[Turn, ...]
    setup_s: float = 0.0  # env seeding before the first boundary exists


@dataclass(frozen=True, kw_only=True)
class Prompt:
    idx: int
    arrival_s: float
    rows: tuple[Row, ...]


@dataclass(frozen=True, kw_only=True)
class GeneratedPrompts:
    """A workload drawn from the scenario seed: many prompts without spelling each one."""

    count: int = setting(ge=0)
    arrival_window_s: float
    turns_min: int = setting(ge=1)
    turns_max: int
    model_s_min: float = setting(ge=0)
    model_s_max: float
    tool_s_min: float = setting(0.0, ge=0)
    tool_s_max: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    first_idx: int = 0


@dataclass(frozen=True, kw_only=True)
class Workload:
    prompts: tuple[Prompt, ...] = ()
    generated: GeneratedPrompts | None = None


# -- control schedule ---------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SnapshotAttempt:
    """A Gym snapshot attempt at ``at_s``; its commit (export + write) takes ``commit_s``."""

    at_s: float
    commit_s: float = 1.0


@dataclass(frozen=True, kw_only=True)
class WeightSync:
    """A refit: closes the weight_sync fence; a colocated engine suspends rollout deadlines."""

    at_s: float
    duration_s: float
    colocated: bool = True


@dataclass(frozen=True, kw_only=True)
class Control:
    snapshots: tuple[SnapshotAttempt, ...] = ()
    weight_syncs: tuple[WeightSync, ...] = ()


# -- faults -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RowRef:
    prompt_idx: int
    row_idx: int
    rl_attempt: int = 0


@dataclass(frozen=True, kw_only=True)
class RowFailure:
    """The row's /run fails ``after_s`` into the execution with an HTTP status."""

    row: RowRef
    after_s: float
    http_status: int


@dataclass(frozen=True, kw_only=True)
class ControllerSilence:
    """After snapshot ``snapshot_index`` (1-based) is prepared, the controller's snapshot task
    goes quiet for ``duration_s`` before it commits (P9: the participants' leases run out)."""

    snapshot_index: int
    duration_s: float


class KillState(StrEnum):
    """Which state a shard kill is pinned to, as the NVIDIA-NeMo/RL #3590 chaos harness pins it."""

    ANY = "any"
    IDLE = "idle"  # nothing in flight on the shard: the loss must be detected
    SERVING = "serving"  # a generation in flight dies with the engine and surfaces at once


class WedgeMode(StrEnum):
    FAIL = "fail"  # every generation fails fast (an engine core dead under a live worker)
    HANG = "hang"  # every generation hangs until the caller's timeout


@dataclass(frozen=True, kw_only=True)
class ShardKill:
    """The shard's engine dies at the first instant >= ``at_s`` it is in ``state``; it stays
    dead (restarting dead shards is elastic recovery, which the replayed system lacks)."""

    shard: int
    at_s: float = setting(ge=0)
    state: KillState = KillState.ANY


@dataclass(frozen=True, kw_only=True)
class ShardWedge:
    """From ``at_s`` the shard answers liveness probes while its generations fail or hang."""

    shard: int
    at_s: float = setting(ge=0)
    mode: WedgeMode = WedgeMode.FAIL


@dataclass(frozen=True, kw_only=True)
class SlowShard:
    """From ``at_s`` the shard's generations take ``factor`` times as long."""

    shard: int
    at_s: float = setting(ge=0)
    factor: float = setting(ge=1)


@dataclass(frozen=True, kw_only=True)
class RefitMiss:
    """Weight sync ``sync_index`` (1-based) completes without reaching the shard's engine, and
    the controller reports the refit only for the shards it reached (P13)."""

    shard: int
    sync_index: int


@dataclass(frozen=True, kw_only=True)
class RouterRestart:
    """Ray recreates the router actor: it comes back with every backend serving."""

    at_s: float = setting(ge=0)


@dataclass(frozen=True, kw_only=True)
class GymSubprocessDeath:
    """A Gym server subprocess dies: its tool steps never answer, its health check fails."""

    at_s: float = setting(ge=0)
    environment: str = "environment"


@dataclass(frozen=True, kw_only=True)
class Faults:
    # Gym finishes the row but its reply never reaches RL (the lost-reply stall, P2)
    lost_replies: tuple[RowRef, ...] = ()
    row_failures: tuple[RowFailure, ...] = ()
    # snapshot indexes (1-based) whose commit loses a policy worker after readiness (P8)
    worker_lost_in_commit: tuple[int, ...] = ()
    controller_silences: tuple[ControllerSilence, ...] = ()
    # the generation fleet (NVIDIA-NeMo/RL #3590; P3-P6, P13, P14 in docs/domain/incidents.md)
    shard_kills: tuple[ShardKill, ...] = ()
    shard_wedges: tuple[ShardWedge, ...] = ()
    slow_shards: tuple[SlowShard, ...] = ()
    refit_misses: tuple[RefitMiss, ...] = ()
    router_restarts: tuple[RouterRestart, ...] = ()
    gym_subprocess_deaths: tuple[GymSubprocessDeath, ...] = ()

    @property
    def shard_faults(self) -> tuple[ShardKill | ShardWedge | SlowShard | RefitMiss, ...]:
        return self.shard_kills + self.shard_wedges + self.slow_shards + self.refit_misses


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    description: str = ""
    version: int = SCHEMA_VERSION
    seed: int = 0
    horizon_s: float = setting(gt=0)
    config: Config = field(default_factory=Config)
    workload: Workload = field(default_factory=Workload)
    control: Control = field(default_factory=Control)
    faults: Faults = field(default_factory=Faults)
    # the fixes the replayed system already has; a replay's variants add to these, and
    # ``without`` takes them away (RL #3590's merged system has all four fleet fixes)
    fixes: tuple[Variant, ...] = ()

    def __post_init__(self) -> None:
        _validate(self)

    # -- serialisation ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return _to_jsonable(self)

    def config_dict(self) -> dict[str, Any]:
        """The thresholds a run used, as the store's ``runs.config`` keeps them."""
        return {"scenario_version": self.version, **_to_jsonable(self.config),
                "control": _to_jsonable(self.control), "faults": _to_jsonable(self.faults),
                "fixes": _to_jsonable(self.fixes)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scenario:
        version = data.get("version", SCHEMA_VERSION) if isinstance(data, Mapping) else None
        if version != SCHEMA_VERSION:
            raise ScenarioError("version", f"scenario schema version {version!r} is not "
                                f"supported (this rolloutscope reads {SCHEMA_VERSION})")
        return build(cls, data, fail=_refused)

    @classmethod
    def from_json(cls, text: str) -> Scenario:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioError("", f"not JSON: {exc}") from None
        return cls.from_dict(data)

    def with_seed(self, seed: int) -> Scenario:
        return dataclasses.replace(self, seed=seed)

    def prompts(self) -> tuple[Prompt, ...]:
        """The workload's prompts, generated ones drawn from the seed, sorted by arrival."""
        out = list(self.workload.prompts)
        gen = self.workload.generated
        if gen is not None:
            out.extend(_generate(gen, self.config.rollout.num_generations_per_prompt,
                                 random.Random(self.seed)))
        return tuple(sorted(out, key=lambda p: (p.arrival_s, p.idx)))


class _TurnDraft:
    """A ``Turn`` being drawn: the same slots in the same order, without the frozen guard, so
    its fields are set as plain attribute stores; it becomes the ``Turn`` it is by assigning
    its ``__class__`` once they all are (the layouts match, so Python allows it)."""

    __slots__ = Turn.__slots__


def _generate(gen: GeneratedPrompts, rows: int, rng: random.Random) -> list[Prompt]:
    """The prompts ``gen`` describes, drawn from ``rng`` in a fixed order (each prompt's arrival,
    then per row its turn count and per turn its model and tool durations).

    ``scale-16k`` draws over a hundred thousand turns, a tenth of its replay's time when each
    went through ``Random.uniform`` and the frozen dataclass ``__init__`` (keyword arguments
    and a guarded ``object.__setattr__`` per field, 1.4 k instructions each). So ``uniform``
    is inlined as the very expression it computes (``a + (b - a) * random()``), and each turn
    is a ``_TurnDraft`` whose fields are stored in declaration order, the values its
    constructor would set, before it becomes a ``Turn``: 2 k instructions a turn, against
    12 k with ``object.__setattr__``. The durations are drawn first, in that order, and
    rounded to the millisecond all at once (``_round_ms``): ``round(x, 3)`` one at a time cost
    another 6 k instructions a turn. ``test_generated_workload`` checks the turns against the
    constructor's, field for field.
    """
    random_, randint = rng.random, rng.randint
    model_lo, model_span = gen.model_s_min, gen.model_s_max - gen.model_s_min
    tool_lo, tool_span = gen.tool_s_min, gen.tool_s_max - gen.tool_s_min
    window = gen.arrival_window_s
    turns_min, turns_max = gen.turns_min, gen.turns_max
    fixed = Turn(model_s=0.0, input_tokens=gen.input_tokens, output_tokens=gen.output_tokens)
    streaming, first_chunk_s, constrained = (fixed.streaming, fixed.first_chunk_s,
                                             fixed.constrained)
    input_tokens, output_tokens = fixed.input_tokens, fixed.output_tokens
    # the draws, in order: per prompt its arrival, per row its turn count, per turn its model
    # then its tool duration (unrounded)
    arrivals: list[float] = []
    turn_counts: list[int] = []
    durations: list[float] = []
    add_duration = durations.append
    for _ in range(gen.count):
        arrivals.append(round(window * random_(), 3))  # uniform(0, window), to the bit
        for _ in range(rows):
            n = randint(turns_min, turns_max)
            turn_counts.append(n)
            for _ in range(n):
                add_duration(model_lo + model_span * random_())
                add_duration(tool_lo + tool_span * random_())
    # model and tool durations alternate: each turn takes the next two
    duration = iter(_round_ms(durations)).__next__
    counts = iter(turn_counts)
    prompts = []
    for i, arrival in enumerate(arrivals):
        group = []
        for _ in range(rows):
            turns = []
            for _ in range(next(counts)):
                turn = _TurnDraft()
                turn.model_s = duration()
                turn.tool_s = duration()
                turn.streaming = streaming
                turn.first_chunk_s = first_chunk_s
                turn.constrained = constrained
                turn.input_tokens = input_tokens
                turn.output_tokens = output_tokens
                turn.__class__ = Turn  # type: ignore[assignment]
                turns.append(turn)
            group.append(Row(turns=tuple(turns)))
        prompts.append(Prompt(idx=gen.first_idx + i, arrival_s=arrival, rows=tuple(group)))
    return prompts


# below this, ``x * 1000.0`` is within 2 ** -23 of the exact product (half a unit in its last
# place); a product within ``_CLEAR_OF_TIE`` of its nearest integer is clear of a tie
_MS_EXACT_BELOW = 2.0 ** 31
_CLEAR_OF_TIE = 0.5 - 2.0 ** -20


def _round_ms(values: list[float]) -> list[float]:
    """``[round(v, 3) for v in values]``, the same floats, computed in bulk.

    ``round(v, 3)`` is the float nearest to ``N / 1000``, N being v * 1000 (the exact product)
    rounded to the nearest integer, ties to even: CPython prints v to 3 decimals (``dtoa``)
    and reads that decimal back, one C-string round trip per value. In bulk: y = v * 1000.0
    (a float, within 2 ** -23 of the exact product for 0 < y < 2 ** 31) and n = ``rint(y)``.
    Where |y - n| < 1/2 - 2 ** -20 (y is not near a tie), the exact product is within 1/2 of
    n too, so n is that N, and ``n / 1000.0`` (n exact, the division rounded correctly) is
    the float nearest to N / 1000: ``round``'s answer. The other values (0, a near-tie,
    negative, huge, not finite) go through ``round`` itself.
    """
    with np.errstate(all="ignore"):  # an infinite or huge value is left to ``round``
        y = np.asarray(values, dtype=np.float64) * 1000.0
        n = np.rint(y)
        out = (n / 1000.0).tolist()
        exact = (y > 0.0) & (y < _MS_EXACT_BELOW) & (np.abs(y - n) < _CLEAR_OF_TIE)
    for i in np.flatnonzero(~exact).tolist():
        out[i] = round(values[i], 3)
    return out


# -- validation ---------------------------------------------------------------------------------
def _refused(problem: ConfigProblem) -> ScenarioError:
    return ScenarioError(problem.path, problem.detail)


def _validate(s: Scenario) -> None:
    """The bounds every field declares, then what relates several fields."""
    if s.version != SCHEMA_VERSION:
        raise ScenarioError("version", f"must be {SCHEMA_VERSION}")
    check_bounds(s, deep=True, fail=_refused)
    ro, wd, ck = s.config.rollout, s.config.watchdog, s.config.checkpoint
    for name in ("rollout_timeout_s", "generation_timeout_s", "env_timeout_s"):
        value = getattr(ro, name)
        # a stall must outlast every deadline, or the watchdog fires first
        # (docs/domain/rollouts-and-deadlines.md#deadlines)
        if value is not None and wd.stall_timeout_s <= value:
            raise ScenarioError("config.watchdog.stall_timeout_s",
                                f"must exceed config.rollout.{name} ({value})")
    if wd.stall_timeout_s <= wd.interval_s:
        raise ScenarioError("config.watchdog", "need 0 < interval_s < stall_timeout_s")
    seen: set[int] = set()
    for i, p in enumerate(s.workload.prompts):
        where = f"workload.prompts[{i}]"
        if p.idx in seen:
            raise ScenarioError(f"{where}.idx", f"duplicate prompt idx {p.idx}")
        seen.add(p.idx)
        if len(p.rows) != ro.num_generations_per_prompt:
            raise ScenarioError(f"{where}.rows", f"has {len(p.rows)} rows; "
                                f"num_generations_per_prompt is {ro.num_generations_per_prompt}")
        for j, row in enumerate(p.rows):
            if not row.turns:
                raise ScenarioError(f"{where}.rows[{j}].turns", "a row needs at least one turn")
            for k, t in enumerate(row.turns):
                if t.first_chunk_s > t.model_s:
                    raise ScenarioError(f"{where}.rows[{j}].turns[{k}]",
                                        "durations must be >= 0 and first_chunk_s <= model_s")
    gen = s.workload.generated
    if gen is not None:
        if gen.turns_min > gen.turns_max:
            raise ScenarioError("workload.generated", "need count >= 0, 1 <= turns_min <= max")
        if gen.model_s_min > gen.model_s_max or gen.tool_s_min > gen.tool_s_max:
            raise ScenarioError("workload.generated", "need 0 <= min <= max durations")
        clash = seen & set(range(gen.first_idx, gen.first_idx + gen.count))
        if clash:
            raise ScenarioError("workload.generated.first_idx",
                                f"generated idx {min(clash)} clashes with an explicit prompt")
    times = [a.at_s for a in s.control.snapshots]
    if times != sorted(times):
        raise ScenarioError("control.snapshots", "attempts must be in time order")
    n_snap = len(s.control.snapshots)
    indexes = [("worker_lost_in_commit", k) for k in s.faults.worker_lost_in_commit]
    indexes += [("controller_silences", c.snapshot_index) for c in s.faults.controller_silences]
    for name, k in indexes:
        if not 1 <= k <= n_snap:
            raise ScenarioError(f"faults.{name}", f"snapshot index {k} is not in 1..{n_snap}")
    if s.faults.worker_lost_in_commit and ck.policy_workers < 2:
        raise ScenarioError("faults.worker_lost_in_commit", "needs policy_workers >= 2")
    _validate_fleet(s)


def _validate_fleet(s: Scenario) -> None:
    fl, f = s.config.fleet, s.faults
    # the participant models' own validators speak for the real config blocks
    try:
        fl.health_config(separate_reported_failure_streak=True)
    except FleetHealthConfigError as exc:
        raise ScenarioError(f"config.fleet.{exc.key or ''}".rstrip("."), exc.detail) from None
    try:
        s.config.router.router_config(router_500_not_504=True)
    except RouterConfigError as exc:
        raise ScenarioError(f"config.router.{exc.key or ''}".rstrip("."), exc.detail) from None
    if fl.shards and fl.min_healthy_shards > fl.shards:
        raise ScenarioError("config.fleet.min_healthy_shards",
                            f"exceeds the {fl.shards} shard(s) of the fleet")
    ro = s.config.rollout.rollout_timeout_s
    if fl.shards and ro is not None and s.config.router.backend_timeout_s > ro:
        # a longer backend timeout could never fire before the group deadline
        # (docs/domain/fleet-health.md#router)
        raise ScenarioError("config.router.backend_timeout_s",
                            f"must not exceed config.rollout.rollout_timeout_s ({ro})")
    groups = (("shard_kills", f.shard_kills), ("shard_wedges", f.shard_wedges),
              ("slow_shards", f.slow_shards), ("refit_misses", f.refit_misses))
    for name, faults in groups:
        for i, fault in enumerate(faults):
            where = f"faults.{name}[{i}]"
            if not 0 <= fault.shard < fl.shards:
                raise ScenarioError(f"{where}.shard", f"shard {fault.shard} is not in "
                                    f"0..{fl.shards - 1} (config.fleet.shards={fl.shards})")
    n_sync = len(s.control.weight_syncs)
    for i, miss in enumerate(f.refit_misses):
        if not 1 <= miss.sync_index <= n_sync:
            raise ScenarioError(f"faults.refit_misses[{i}].sync_index",
                                f"weight sync {miss.sync_index} is not in 1..{n_sync}")
    if f.router_restarts and not fl.shards:
        raise ScenarioError("faults.router_restarts", "needs a generation fleet")
    if len(set(s.fixes)) != len(s.fixes):
        raise ScenarioError("fixes", "a fix is listed twice")


# -- serialisation of the dataclasses above ------------------------------------------------------
def _to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return [_to_jsonable(v) for v in value]
    return value
