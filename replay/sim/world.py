"""The simulated system of one replay: it builds the participants and the sides, wires each side
to what it may ask of the others (``ports``), and puts the scenario's timeline on the scheduler.
It makes no decision itself.

Built in dependency order, so no side needs another before it exists: the fleet (it asks
nothing of the others); Gym (the fleet, the agent, policy-model and resources servers); the
participant notes and the retire coordination (Gym's hooks); the controller (Gym, the fleet,
the retire coordination); the snapshot transaction (the controller, Gym, the notes). Two pieces
of state are shared (``signals``): how the run ends, and whether a prepare is waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rolloutscope.clock import Clock
from rolloutscope.vocabulary import ParticipantKind
from rolloutscope.replay.backends.base import GenerationSession
from rolloutscope.replay.event_engine import Priority, Scheduler
from rolloutscope.replay.participants.agent import AgentParticipant
from rolloutscope.replay.participants.coordinator import CheckpointCoordinator
from rolloutscope.replay.participants.deadlines import DeadlineRegistry
from rolloutscope.replay.participants.environment import (
    EnvironmentParticipant,
    ResourcesParticipant,
)
from rolloutscope.replay.participants.model import ModelParticipant
from rolloutscope.replay.scenario import Scenario
from rolloutscope.replay.sim.controller import ControllerSide
from rolloutscope.replay.sim.controller_recorder import ControllerRecorder
from rolloutscope.replay.sim.fleet import FleetHealthFactory, FleetSide, RouterFactory
from rolloutscope.replay.sim.fleet_recorder import FleetRecorder
from rolloutscope.replay.sim.gym import GymSide
from rolloutscope.replay.sim.gym_recorder import GymRecorder
from rolloutscope.replay.sim.notes import ParticipantNotes
from rolloutscope.replay.sim.ports import DeadlineBook
from rolloutscope.replay.sim.retire import RetireCoordinator
from rolloutscope.replay.sim.signals import PrepareWatch, RunEnd
from rolloutscope.replay.sim.snapshot import SnapshotProcess
from rolloutscope.replay.sim.snapshot_recorder import SnapshotRecorder
from rolloutscope.replay.telemetry import VIRTUAL_EPOCH_NS, Telemetry
from rolloutscope.replay.variants import Variant
from rolloutscope.replay.virtual_time import AsyncRuntime


# builds the controller's deadline registry: (clock, counted holders?) -> a registry with the
# reference model's public methods (add, complete, cancel, fire, suspend, resume)
DeadlineRegistryFactory = Callable[..., DeadlineBook]
# builds the agent participant: (instance, lease_grace_s[, runtime]) -> an ``AgentServer`` that
# is also a checkpoint participant (Gym's real one: ``replay.real.gym_agent``)
AgentParticipantFactory = Callable[..., Any]


def _build(factory: Callable[..., Any], runtime: Callable[[], AsyncRuntime],
           **kwargs: Any) -> Any:
    """Call a participant factory, handing it the virtual-time runtime if it takes one (real
    async code runs there)."""
    import inspect

    takes = getattr(factory, "takes_runtime", None)
    if takes is None:
        try:
            takes = "runtime" in inspect.signature(factory).parameters
        except (TypeError, ValueError):
            takes = False
    return factory(**kwargs, runtime=runtime()) if takes else factory(**kwargs)


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
        v = self.variants = frozenset(variants)
        self.tel = tel
        sched = self.sched = sched or Scheduler()
        self._runtime: AsyncRuntime | None = None
        clock = sched.clock
        cfg, faults = scenario.config, scenario.faults

        # -- the participants (the reference models)
        lease: dict[str, Any] = {"clock": clock, "lease_grace_s": cfg.checkpoint.lease_grace_s}
        self.environment = EnvironmentParticipant(instance="environment", **lease)
        self.model = ModelParticipant(
            instance="policy_model", workers=cfg.checkpoint.policy_workers,
            generation_cuts=cfg.checkpoint.generation_cuts,
            calls_wait_at_closed_admission=Variant.CALLS_WAIT_AT_CLOSED_ADMISSION in v,
            **lease)
        self.agent = AgentParticipant(instance="agent", **lease) \
            if agent_participant_factory is None else _build(
                agent_participant_factory, lambda: self.runtime, instance="agent",
                lease_grace_s=cfg.checkpoint.lease_grace_s)
        self.resources = ResourcesParticipant(instance="resources", **lease)
        self.coordinator = CheckpointCoordinator({
            ParticipantKind.ENVIRONMENT: [self.environment], ParticipantKind.MODEL: [self.model],
            ParticipantKind.AGENT: [self.agent], ParticipantKind.RESOURCES: [self.resources]},
            clock)
        # the pause fix needs counted holders: a flag would let a snapshot ending during a
        # training switch restart that switch's clocks early
        counted = bool({Variant.COUNTED_DEADLINE_HOLDERS,
                        Variant.PAUSE_DEADLINES_DURING_SNAPSHOT} & v)
        self.deadlines = _build(deadline_registry_factory or reference_deadline_registry,
                                lambda: self.runtime, clock=clock, counted=counted)

        # -- the sides
        self.run_end = RunEnd(stop=sched.stop)
        self.prepare = PrepareWatch()
        self.fleet = FleetSide(
            config=cfg, faults=faults, timeline=sched, clock=clock.now, run_end=self.run_end,
            generation=generation, recorder=FleetRecorder(tel=tel, timeline=sched),
            fleet_health_enabled=Variant.FLEET_HEALTH_ENABLED in v,
            separate_reported_failure_streak=Variant.SEPARATE_REPORTED_FAILURE_STREAK in v,
            router_500_not_504=Variant.ROUTER_500_NOT_504 in v,
            probe_at_probe_interval=Variant.PROBE_AT_PROBE_INTERVAL in v,
            fleet_health_factory=fleet_health_factory, router_factory=router_factory)
        self.gym = GymSide(
            timeline=sched, agent=self.agent, model=self.model, resources=self.resources,
            fleet=self.fleet, generation=generation, prepare=self.prepare, faults=faults,
            recorder=GymRecorder(tel=tel, timeline=sched))
        checkpoint_rec = SnapshotRecorder(tel=tel, timeline=sched)
        notes = ParticipantNotes(coordinator=self.coordinator, gym=self.gym, timeline=sched,
                                 recorder=checkpoint_rec)
        retire = RetireCoordinator(coordinator=self.coordinator, agent=self.agent, gym=self.gym,
                                   notes=notes, recorder=checkpoint_rec)
        self.controller = ControllerSide(
            config=cfg, faults=faults, timeline=sched, run_end=self.run_end,
            deadlines=self.deadlines, gym=self.gym, fleet=self.fleet, retire=retire,
            prepare=self.prepare, recorder=ControllerRecorder(tel=tel, timeline=sched),
            retire_then_adopt=Variant.RETIRE_THEN_ADOPT in v,
            pause_deadlines_during_snapshot=Variant.PAUSE_DEADLINES_DURING_SNAPSHOT in v)
        self.snapshots = SnapshotProcess(
            attempts=scenario.control.snapshots, checkpoint=cfg.checkpoint, faults=faults,
            timeline=sched, coordinator=self.coordinator, workers=self.model, gym=self.gym,
            controller=self.controller, notes=notes, prepare=self.prepare,
            recorder=checkpoint_rec)
        # a real participant acts on its own on the runtime (its lease expires, a parked run
        # resumes): its notes are drained then, and a waiting prepare re-checked
        if hasattr(self.agent, "on_change"):
            self.agent.on_change = lambda: (notes.drain(), self.prepare.gym_changed())

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

    def close(self) -> None:
        """Stop what real participant code still runs (after the horizon)."""
        if self._runtime is not None:
            self._runtime.close()

    @property
    def completions(self) -> int:
        return self.gym.completions

    @property
    def stalls(self) -> int:
        return self.controller.stalls

    def schedule(self) -> None:
        """The scenario's timeline: arrivals, snapshots, weight syncs, faults, the watchdog."""
        s, sched = self.scenario, self.sched
        for prompt in s.prompts():
            sched.at(prompt.arrival_s, self.controller.arrive, prompt)
        self.snapshots.schedule()
        for index, sync in enumerate(s.control.weight_syncs, start=1):
            sched.at(sync.at_s, self.controller.weight_sync, sync.duration_s,
                     sync.colocated, index, priority=Priority.CONTROL)
        self.fleet.schedule()
        for death in s.faults.gym_subprocess_deaths:
            sched.at(death.at_s, self._gym_subprocess_died, death.environment,
                     priority=Priority.CONTROL)
        sched.at(s.config.watchdog.interval_s, self.controller.watchdog_tick,
                 priority=Priority.WATCHDOG)

    def _gym_subprocess_died(self, environment: str) -> None:
        """A Gym server subprocess exits: its tool steps stop answering, and the controller's
        environment health check sees it."""
        self.gym.subprocess_died()
        self.controller.gym_subprocess_died(environment)
