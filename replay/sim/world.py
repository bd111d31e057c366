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
from rolloutscope.replay.participants.clock import Clock
from rolloutscope.replay.sim.controller import ControllerSide
from rolloutscope.replay.sim.fleet import FleetHealthFactory, FleetSide, RouterFactory
from rolloutscope.replay.sim.gym import GymSide
from rolloutscope.replay.sim.snapshot import SnapshotProcess
from rolloutscope.replay.telemetry import VIRTUAL_EPOCH_NS, Telemetry
from rolloutscope.replay.variants import Variant
from rolloutscope.replay.virtual_time import AsyncRuntime


# builds the controller's deadline registry: (clock, counted holders?) -> a registry with the
# reference model's public methods (add, complete, cancel, fire, suspend, resume)
DeadlineRegistryFactory = Callable[..., Any]
# builds the agent participant: (runtime, instance, lease_grace_s) -> the reference surface
AgentParticipantFactory = Callable[..., Any]


def _with_runtime(factory: Callable[..., Any], world: World, **kwargs: Any) -> Any:
    """Call a participant factory, handing it the virtual-time runtime if it takes one (real
    async code runs there)."""
    import inspect

    takes = getattr(factory, "takes_runtime", None)
    if takes is None:
        try:
            takes = "runtime" in inspect.signature(factory).parameters
        except (TypeError, ValueError):
            takes = False
    return factory(**kwargs, runtime=world.runtime) if takes else factory(**kwargs)


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
                 agent_participant_factory: AgentParticipantFactory | None = None,
                 generation: GenerationSession | None = None) -> None:
        self.scenario = scenario
        # real model calls (a wall-clock replay on an engine); None: the captured timings
        self.generation = generation
        self.variants = frozenset(variants)
        self.tel = tel
        self.sched = sched or Scheduler()
        self._runtime: AsyncRuntime | None = None
        clock = self.sched.clock
        ck = scenario.config.checkpoint
        lease = {"clock": clock, "lease_grace_s": ck.lease_grace_s}
        self.environment = EnvironmentParticipant(instance="environment", **lease)
        self.model = ModelParticipant(
            instance="policy_model", workers=ck.policy_workers,
            generation_cuts=ck.generation_cuts,
            calls_wait_at_closed_admission=Variant.CALLS_WAIT_AT_CLOSED_ADMISSION in self.variants,
            **lease)
        self.agent = (AgentParticipant(instance="agent", **lease)
                      if agent_participant_factory is None else _with_runtime(
                          agent_participant_factory, self, instance="agent",
                          lease_grace_s=ck.lease_grace_s))
        self.resources = ResourcesParticipant(instance="resources", **lease)
        self.coordinator = CheckpointCoordinator({
            ParticipantKind.ENVIRONMENT: [self.environment], ParticipantKind.MODEL: [self.model],
            ParticipantKind.AGENT: [self.agent], ParticipantKind.RESOURCES: [self.resources]},
            clock)
        # the seed-004 fix needs counted holders: a flag would let a snapshot ending during a
        # training switch restart that switch's clocks early
        counted = bool({Variant.COUNTED_DEADLINE_HOLDERS,
                        Variant.PAUSE_DEADLINES_DURING_SNAPSHOT} & self.variants)
        self.deadlines = _with_runtime(deadline_registry_factory or reference_deadline_registry,
                                       self, clock=clock, counted=counted)
        self.env_dead = False
        self.fleet = FleetSide(self, fleet_health_factory=fleet_health_factory,
                               router_factory=router_factory)
        self.gym = GymSide(self)
        self.controller = ControllerSide(self)
        self.snapshots = SnapshotProcess(self)
        # real code that acts on its own, on the virtual-time runtime: a deadline expiring, a
        # participant's lease running out
        if getattr(self.deadlines, "fires_itself", False):
            self.deadlines.on_fire = self.controller.deadline_fired
        if hasattr(self.agent, "on_change"):
            self.agent.on_change = self._participant_acted
        self.completions = 0
        self.stalls = 0

    @property
    def now(self) -> float:
        return self.sched.clock.t

    @property
    def runtime(self) -> AsyncRuntime:
        """The event loop real async participants run on, on this replay's clock (made on first
        use: a replay of the reference models never needs one)."""
        if self._runtime is None:
            self._runtime = AsyncRuntime(self.sched, epoch_s=VIRTUAL_EPOCH_NS / 1e9)
        return self._runtime

    def _participant_acted(self) -> None:
        self.snapshots.drain_notes()
        self.on_gym_change()

    def close(self) -> None:
        if self._runtime is not None:
            self._runtime.close()

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
