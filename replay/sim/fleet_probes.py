"""The controller's probe pump: each round probes every serving shard at once, drains the
router's failures into fleet health, pushes the serving set to the router (unconditionally),
then checks exhaustion, which ends the run with ``GenerationFleetExhausted``.

Before the probe-interval fix the rounds ride the watchdog's tick (the controller calls
``tick``); with it they run every ``probe_interval_s`` on their own.
"""

from __future__ import annotations

from rolloutscope.vocabulary import ShardTrigger
from rolloutscope.replay.event_engine import Priority
from rolloutscope.replay.participants.fleet_health import GenerationFleetExhausted
from rolloutscope.replay.sim.engines import ACTOR_DIED, Engine
from rolloutscope.replay.sim.fleet_path import GenerationPath
from rolloutscope.replay.sim.fleet_recorder import FleetRecorder
from rolloutscope.replay.sim.fleet_stays import ShardStays
from rolloutscope.replay.sim.ports import Timeline
from rolloutscope.replay.sim.signals import RunEnd

_PROBE_TRIGGER = {True: ShardTrigger.PROBE_SUCCESS, False: ShardTrigger.PROBE_FAILURE}


class ProbePump:
    def __init__(self, *, engines: list[Engine], stays: ShardStays, path: GenerationPath,
                 drain_router_failures: bool, min_healthy_shards: int, timeline: Timeline,
                 run_end: RunEnd, recorder: FleetRecorder) -> None:
        """``drain_router_failures``: the router counts failures for fleet health to drain
        (the router-500 fix); before it, it neither dropped nor counted a failing backend."""
        self._engines = engines
        self._stays = stays
        self._path = path
        self._drain_router_failures = drain_router_failures
        self._min_healthy_shards = min_healthy_shards
        self._timeline = timeline
        self._run_end = run_end
        self._rec = recorder
        self.exhausted = False

    def start(self, interval_s: float) -> None:
        """Rounds every ``interval_s`` of their own (the probe-interval fix)."""
        self._timeline.at(interval_s, self._pump, interval_s, priority=Priority.WATCHDOG)

    def _pump(self, interval_s: float) -> None:
        self.tick()
        if not self.exhausted:
            self._timeline.after(interval_s, self._pump, interval_s, priority=Priority.WATCHDOG)

    def tick(self) -> None:
        """One probe round."""
        if self.exhausted:
            return
        health, stays, router = self._stays.health, self._stays, self._path.router
        assert router is not None
        self._rec.round_started()
        for idx in health.serving_shards():
            ok = self._engines[idx].alive  # a wedged engine's worker still answers is_alive
            self._rec.probed(idx, ok)
            stays.call(_PROBE_TRIGGER[ok], health.record_probe, idx, ok,
                       None if ok else ACTOR_DIED)
        if self._drain_router_failures:
            self._drain()
        urls = tuple(self._engines[i].url for i in health.serving_shards())
        router.set_serving_backends(urls)
        self._rec.membership_pushed(urls, health.membership_epoch)
        try:
            health.raise_if_exhausted()
        except GenerationFleetExhausted as exc:
            self.exhausted = True
            counts = stays.counts()
            self._rec.exhausted(serving=len(health.serving_shards()),
                                min_healthy=self._min_healthy_shards, message=str(exc),
                                counts=counts)
            self._rec.round_ended()
            self._run_end.raise_error("GenerationFleetExhausted")
            return
        self._rec.round_ended()

    def _drain(self) -> None:
        router = self._path.router
        assert router is not None
        drained = router.drain_failures()
        if not drained:
            return
        self._rec.failures_drained(drained)
        health = self._stays.health
        for url, count in drained.items():
            idx = health.shard_for_base_url(url)
            if idx is None:
                continue
            error = f"RuntimeError: router: {count} failed request(s) to {url}"
            for _ in range(count):
                self._rec.failure_reported(idx, url, error)
                self._stays.call(ShardTrigger.REPORTED_FAILURE, health.report_failure, idx,
                                 error)
