"""The simulated system of one replay: participants, controller, Gym, snapshots, one clock."""

from __future__ import annotations

from collections.abc import Iterable

from rolloutscope.collectors.vocabulary import ParticipantKind
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
from rolloutscope.replay.sim.controller import ControllerSide
from rolloutscope.replay.sim.gym import GymSide
from rolloutscope.replay.sim.snapshot import SnapshotProcess
from rolloutscope.replay.telemetry import Telemetry
from rolloutscope.replay.variants import Variant


class World:
    """Builds the participants from the scenario and wires them to one scheduler.

    Later participants (generation fleet health, router) join here: they read the same clock,
    are driven by scheduled events, and report through the same telemetry.
    """

    def __init__(self, scenario: Scenario, *, variants: Iterable[Variant], tel: Telemetry,
                 sched: Scheduler | None = None) -> None:
        self.scenario = scenario
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
        self.deadlines = DeadlineRegistry(clock, counted=counted)
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
        for sync in s.control.weight_syncs:
            self.sched.at(sync.at_s, self.controller.weight_sync, sync.duration_s,
                          sync.colocated, priority=Priority.CONTROL)
        self.sched.at(s.config.watchdog.interval_s, self.controller.watchdog_tick,
                      priority=Priority.WATCHDOG)
