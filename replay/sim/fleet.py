"""The generation fleet of a replay: engines, fleet health, the router, probes, refits.

The simulated engines are ground truth (``engines``); the fleet-health model and the router only
learn what the controller's probe pump, the router's drained failures and the weight syncs tell
them, through the real system's public method names and nothing else, so a user's own classes
can stand in for the reference models (``FleetHealthFactory``, ``RouterFactory``; the protocols
they must meet are ``ports.FleetHealthModel`` and ``ports.RouterModel``).

``FleetSide`` builds the pieces and is what the other sides see (``ports.FleetForGym``,
``ports.FleetForController``):

- ``GenerationPath``: Gym's policy calls through the router or round-robin (``fleet_path``);
- ``ProbePump``: probe rounds, drains and membership pushes (``fleet_probes``);
- ``ShardStays``: fleet-health calls and the shard stays they move (``fleet_stays``);
- ``FleetFaults``: kills, wedges, slow shards, router restarts (``fleet_faults``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rolloutscope.vocabulary import ShardTrigger
from rolloutscope.replay.backends.base import GenerationSession
from rolloutscope.replay.participants.fleet_health import (
    FleetHealthConfig,
    GenerationFleetHealth,
    Transition,
)
from rolloutscope.replay.participants.router import GenerationRouter, RouterConfig
from rolloutscope.replay.scenario import Config, Faults
from rolloutscope.replay.sim.engines import Engine, FleetCall, ModelCallAnswers
from rolloutscope.replay.sim.fleet_faults import FleetFaults
from rolloutscope.replay.sim.fleet_path import GenerationPath
from rolloutscope.replay.sim.fleet_probes import ProbePump
from rolloutscope.replay.sim.fleet_recorder import FleetRecorder
from rolloutscope.replay.sim.fleet_stays import ShardStays
from rolloutscope.replay.sim.ports import FleetHealthModel, RouterModel, Timeline
from rolloutscope.replay.sim.gym_run import Run
from rolloutscope.replay.sim.signals import RunEnd


# -- the seam for plug-ins ----------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class FleetHealthSpec:
    """What a fleet-health factory is given. ``observer`` is optional to honour: a model that
    never calls it has its transitions derived from ``snapshot()`` after each call."""

    num_shards: int
    config: FleetHealthConfig
    clock: Callable[[], float]
    base_urls: tuple[str, ...]
    observer: Callable[[Transition], None]


@dataclass(frozen=True, kw_only=True)
class RouterSpec:
    backends: tuple[str, ...]
    config: RouterConfig
    health_managed: bool


FleetHealthFactory = Callable[[FleetHealthSpec], FleetHealthModel]
RouterFactory = Callable[[RouterSpec], RouterModel]


def reference_fleet_health(spec: FleetHealthSpec) -> GenerationFleetHealth:
    return GenerationFleetHealth(num_shards=spec.num_shards, config=spec.config,
                                 clock=spec.clock, base_urls=spec.base_urls,
                                 observer=spec.observer)


def reference_router(spec: RouterSpec) -> GenerationRouter:
    return GenerationRouter(backends=spec.backends, config=spec.config,
                            health_managed=spec.health_managed)


# -- the fleet as the other sides see it ---------------------------------------------------------
class FleetSide:
    def __init__(self, *, config: Config, faults: Faults, timeline: Timeline,
                 clock: Callable[[], float], run_end: RunEnd,
                 generation: GenerationSession | None, recorder: FleetRecorder,
                 fleet_health_enabled: bool, separate_reported_failure_streak: bool,
                 router_500_not_504: bool, probe_at_probe_interval: bool,
                 fleet_health_factory: FleetHealthFactory | None = None,
                 router_factory: RouterFactory | None = None) -> None:
        self._faults = faults
        self._config = config
        self.engines = [Engine(i) for i in range(config.fleet.shards)]
        self.active = bool(self.engines)
        self.managed = self.active and fleet_health_enabled
        self.probe_on_interval = probe_at_probe_interval
        self.stays = ShardStays(engines=self.engines, recorder=recorder)
        router: RouterModel | None = None
        if self.managed:
            urls = tuple(e.url for e in self.engines)
            self.stays.adopt((fleet_health_factory or reference_fleet_health)(FleetHealthSpec(
                num_shards=len(self.engines), clock=clock,
                config=config.fleet.health_config(
                    separate_reported_failure_streak=separate_reported_failure_streak),
                base_urls=urls, observer=self.stays.on_transition)))
            router = (router_factory or reference_router)(RouterSpec(
                backends=urls,
                config=config.router.router_config(router_500_not_504=router_500_not_504),
                # the pre-fix router neither dropped nor counted a failing backend
                health_managed=router_500_not_504))
            self.stays.open_initial()
        self.path = GenerationPath(engines=self.engines, router=router,
                                   backend_timeout_s=config.router.backend_timeout_s,
                                   timeline=timeline, generation=generation, recorder=recorder)
        self.probes = ProbePump(engines=self.engines, stays=self.stays, path=self.path,
                                drain_router_failures=router_500_not_504,
                                min_healthy_shards=config.fleet.min_healthy_shards,
                                timeline=timeline, run_end=run_end, recorder=recorder)
        self.faults = FleetFaults(engines=self.engines, path=self.path, timeline=timeline,
                                  generation=generation, recorder=recorder)

    @property
    def health(self) -> FleetHealthModel | None:
        return self.stays.health

    @property
    def router(self) -> RouterModel | None:
        return self.path.router

    def schedule(self) -> None:
        self.faults.schedule(self._faults)
        if self.managed and self.probe_on_interval:
            self.probes.start(self._config.fleet.probe_interval_s)

    # -- FleetForGym ------------------------------------------------------------------------------
    def model_call(self, run: Run, duration_s: float, answers: ModelCallAnswers) -> FleetCall:
        return self.path.model_call(run, duration_s, answers)

    def cancel(self, call: FleetCall) -> None:
        self.path.cancel(call)

    # -- FleetForController -----------------------------------------------------------------------
    def probe_tick(self) -> None:
        if self.managed:
            self.probes.tick()

    def dead_ranks(self) -> list[int]:
        return [e.idx for e in self.engines if not e.alive]

    def refit(self, version: int, missed: frozenset[int]) -> None:
        """A weight sync completed: every live engine it reached holds ``version`` now."""
        for engine in self.engines:
            if not engine.alive or engine.idx in missed:
                continue
            engine.weight_version = version
            if self.managed:
                moved = self.stays.call(ShardTrigger.REFIT, self.stays.health.report_refit,
                                        engine.idx, version)
                if engine.idx not in moved and self.stays.known(engine.idx):
                    self.stays.restay(engine.idx)

    def gauges(self) -> dict[str, float]:
        """The fleet's part of the watchdog's gauges."""
        if not self.managed:
            return {}
        counts = self.stays.counts()
        health, router = self.stays.health, self.path.router
        assert router is not None
        out: dict[str, float] = {f"gen_fleet/shards/{s.value}": n for s, n in counts.items()}
        out["gen_fleet/serving_shards"] = len(health.serving_shards())
        out["gen_fleet/membership_epoch"] = health.membership_epoch
        for shard in self.stays.shards():
            if shard.weight_version is not None:
                out[f"gen_fleet/shard_weight_version/{shard.dp_shard_idx}"] = shard.weight_version
        m = router.metrics()
        out.update({"router/requests_total": m.requests_total,
                    "router/no_healthy_backend_total": m.no_healthy_backend_total,
                    "router/backend_error_total": m.backend_error_total,
                    "router/serving_backends": m.serving_backends})
        return out
