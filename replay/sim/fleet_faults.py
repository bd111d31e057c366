"""The faults a scenario injects into the generation fleet, as the chaos harness injects them:
shard kills pinned to a state, wedged and slow engines, router restarts."""

from __future__ import annotations

from rolloutscope.replay.backends.base import GenerationSession
from rolloutscope.replay.event_engine import Priority
from rolloutscope.replay.scenario import Faults, KillState, ShardKill, WedgeMode
from rolloutscope.replay.sim.engines import FAST_FAILURE_S, Engine
from rolloutscope.replay.sim.fleet_path import GenerationPath
from rolloutscope.replay.sim.fleet_recorder import FleetRecorder
from rolloutscope.replay.sim.ports import Timeline


class FleetFaults:
    def __init__(self, *, engines: list[Engine], path: GenerationPath, timeline: Timeline,
                 generation: GenerationSession | None, recorder: FleetRecorder) -> None:
        self._engines = engines
        self._path = path
        self._timeline = timeline
        self._generation = generation
        self._rec = recorder

    def schedule(self, faults: Faults) -> None:
        at = self._timeline.at
        for kill in faults.shard_kills:
            at(kill.at_s, self._kill_when_pinned, kill, priority=Priority.CONTROL)
        for wedge in faults.shard_wedges:
            at(wedge.at_s, self._wedge, wedge.shard, wedge.mode, priority=Priority.CONTROL)
        for slow in faults.slow_shards:
            at(slow.at_s, self._slow, slow.shard, slow.factor, priority=Priority.CONTROL)
        for restart in faults.router_restarts:
            at(restart.at_s, self._path.router_restarted, priority=Priority.CONTROL)

    def _kill_when_pinned(self, kill: ShardKill) -> None:
        engine = self._engines[kill.shard]
        if not engine.alive:
            return
        busy = bool(engine.calls)
        if (kill.state is KillState.IDLE and busy) or (kill.state is KillState.SERVING
                                                        and not busy):
            # the harness waits for the pinned state, re-reading it just before the kill
            self._timeline.after(FAST_FAILURE_S, self._kill_when_pinned, kill,
                                 priority=Priority.CONTROL)
            return
        engine.alive = False
        if self._generation is not None:  # the driver makes the shard's endpoint unreachable
            self._generation.set_reachable(engine.idx, False)
        self._rec.fault("shard_kill", f"engine killed while {'serving' if busy else 'idle'} "
                        f"({len(engine.calls)} generation(s) in flight)", engine)
        self._path.engine_died(engine)

    def _wedge(self, shard: int, mode: WedgeMode) -> None:
        engine = self._engines[shard]
        engine.wedge = mode
        self._rec.fault("shard_wedge", f"engine answers probes; its generations {mode.value}",
                        engine)

    def _slow(self, shard: int, factor: float) -> None:
        engine = self._engines[shard]
        engine.slowdown = factor
        self._rec.fault("slow_shard", f"generations take {factor:g}x as long", engine)
