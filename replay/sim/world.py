"""The simulated system of one replay: participants, controller, Gym, snapshots, one clock."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rolloutscope.vocabulary import ParticipantKind
from rolloutscope.replay.backends.base import GenerationSession
from rolloutscope.replay.engine import Priority, Scheduler
from rolloutscope.replay.participants.agent import AgentParticipant
from rolloutscope.replay.participants.coordinator import CheckpointCoordinator
from rolloutscope.replay.participants.deadlines import DeadlineRegistry
from rolloutscope.replay.participants.environment import (
    EnvironmentParticipant,
    ResourcesParticipant,
)
from rolloutscope.replay.participants.model import ModelParticipant
from rolloutscope.replay.scenario import Scenario
from rolloutscope.clock import Clock
from rolloutscope.replay.sim.controller import ControllerSide
from rolloutscope.replay.sim.fleet import FleetHealthFactory, FleetSide, RouterFactory
from rolloutscope.replay.sim.gym import GymSide
from rolloutscope.replay.sim.snapshot import SnapshotProcess
from rolloutscope.replay.telemetry import Telemetry
from rolloutscope.replay.variants import Variant


# builds the controller's deadline registry: (clock, counted holders?) -> a registry with the
# reference model's public methods (add, complete, cancel, fire, suspend, resume)
DeadlineRegistryFactory = Callable[..., Any]


def reference_deadline_registry(*, clock: Clock, counted: bool) -> DeadlineRegistry:
    return DeadlineRegistry(clock, counted=counted)


class World:
    """Builds the participants from the scenario and wires them to one scheduler.

    The fleet-health model, the router and the deadline registry are built by factories that
    default to the reference models; a replay may pass its own (a user's real classes behind
    the same public methods), which then run in their place against the same simulated world.
    """

    def __init__(self, scenario: Scenario, *, variants: Iterable[Variant], tel: Telemetry,
                 sched: Scheduler | None = None,
                 fleet_health_factory: FleetHealthFactory | None = None,
                 router_factory: RouterFactory | None = None,
                 deadline_registry_factory: DeadlineRegistryFactory | None = None,
                 generation: GenerationSession | None = None) -> None:
        self.scenario = scenario
        # real model calls (a wall-clock replay on an engine); None: the captured timings
        self.generation = generation
        self.variants = frozenset(variants)
        self.tel = tel
        self.sched = sched or Scheduler()
        clock = self.sched.clock
        ck = scenario.config.checkpoint
        lease = {"clock": clock, "lease_grace_s": ck.lease_grace_s}
        self.environment = EnvironmentParticipant(instance="environment", **lease)
        self.model = ModelParticipant(
            instance="policy_model", workers=ck.policy_workers,
            generation_cuts=ck.generation_cuts,
            calls_wait_at_closed_admission=Variant.CALLS_WAIT_AT_CLOSED_ADMISSION in self.variants,
            **lease)
        self.agent = AgentParticipant(instance="agent", **lease)
        self.resources = ResourcesParticipant(instance="resources", **lease)
        self.coordinator = CheckpointCoordinator({
            ParticipantKind.ENVIRONMENT: [self.environment], ParticipantKind.MODEL: [self.model],
            ParticipantKind.AGENT: [self.agent], ParticipantKind.RESOURCES: [self.resources]},
            clock)
        # the seed-004 fix needs counted holders: a flag would let a snapshot ending during a
        # training switch restart that switch's clocks early
        counted = bool({Variant.COUNTED_DEADLINE_HOLDERS,
                        Variant.PAUSE_DEADLINES_DURING_SNAPSHOT} & self.variants)
        self.deadlines = (deadline_registry_factory or reference_deadline_registry)(
            clock=clock, counted=counted)
        self.env_dead = False
        self.fleet = FleetSide(self, fleet_health_factory=fleet_health_factory,
                               router_factory=router_factory)
        self.gym = GymSide(self)
        self.controller = ControllerSide(self)
        self.snapshots = SnapshotProcess(self)
        self.completions = 0
        self.stalls = 0

    @property
    def now(self) -> float:
        return self.sched.clock.t

    def on_gym_change(self) -> None:
        if self.snapshots.preparing:
            self.snapshots.poke()

    def schedule(self) -> None:
        s = self.scenario
        for prompt in s.prompts():
            self.sched.at(prompt.arrival_s, self.controller.arrive, prompt)
        self.snapshots.schedule()
        for index, sync in enumerate(s.control.weight_syncs, start=1):
            self.sched.at(sync.at_s, self.controller.weight_sync, sync.duration_s,
                          sync.colocated, index, priority=Priority.CONTROL)
        self.fleet.schedule()
        for death in s.faults.gym_subprocess_deaths:
            self.sched.at(death.at_s, self.controller.gym_subprocess_died, death.environment,
                          priority=Priority.CONTROL)
        self.sched.at(s.config.watchdog.interval_s, self.controller.watchdog_tick,
                      priority=Priority.WATCHDOG)
