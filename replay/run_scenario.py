"""Run a scenario: build the world, drive the clock, export the spans, record the run.

``replay`` streams spans into any OTel ``SpanExporter`` (and the watchdog's gauges into an
optional metric sink); ``replay_into_store`` also registers the run (scenario, variants, seed,
full config) in a run store and writes the gauges as ``metrics`` rows, so detectors and later
replays read the thresholds this run actually used. A controller that raises ends the run early:
that comes back as data (``ReplayResult.raised``), not as an exception.

The variants a run replays with are the scenario's own fixes, plus ``variants``, minus
``without``. The participant factories (``fleet_health_factory``, ``router_factory``,
``deadline_registry_factory``, ``agent_participant_factory``) default to the reference models;
``rolloutscope.replay.plugins`` builds them from real NeMo-RL / NeMo-Gym code.

With a generation ``backend`` (``rolloutscope.replay.backends``) the replay runs in wall-clock
time on a ``PacedDriver`` with an ``Inbox`` (one is made at speed 1 unless the caller passes its
own), every policy call is served by the backend, and ``stats["generation"]`` holds the backend,
device, engine versions and the per-kind latencies that the run records in ``runs.metadata``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from rolloutscope.collectors.exporter import StoreSpanExporter
from rolloutscope.store import RunStore
from rolloutscope.store.rows import RowBatch
from rolloutscope.vocabulary import RunSource
from rolloutscope.replay.backends.base import BackendError, GenerationBackend, GenerationSession
from rolloutscope.replay.event_engine import (
    Driver,
    Inbox,
    PacedDriver,
    Scheduler,
    VirtualDriver,
    few_collections,
)
from rolloutscope.replay.scenario import Scenario
from rolloutscope.replay.sim.fleet import FleetHealthFactory, RouterFactory
from rolloutscope.replay.sim.world import AgentParticipantFactory, DeadlineRegistryFactory, World
from rolloutscope.replay.telemetry import VIRTUAL_EPOCH_NS, MetricPoint, MetricSink, Telemetry
from rolloutscope.replay.variants import Variant, ordered, parse_variants


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    run_id: str
    scenario: str
    variants: tuple[str, ...]
    seed: int
    simulated_s: float
    events: int
    spans: int
    open_intervals: int
    raised: str | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)


def default_run_id(scenario: str, seed: int, variants: Iterable[Variant],
                   without: Iterable[Variant] = ()) -> str:
    """``NAME.sSEED``, ``+V`` for each variant added to the scenario's fixes, ``-V`` for each
    fix taken away."""
    added, removed = ordered(variants), ordered(without)
    return (f"{scenario}.s{seed}" + "".join(f"+{v}" for v in added)
            + "".join(f"-{v}" for v in removed))


def _parse(variants: Iterable[Variant | str]) -> frozenset[Variant]:
    return parse_variants(v.value if isinstance(v, Variant) else v for v in variants)


def effective_variants(scenario: Scenario, variants: Iterable[Variant | str] = (),
                       without: Iterable[Variant | str] = ()) -> frozenset[Variant]:
    return (frozenset(scenario.fixes) | _parse(variants)) - _parse(without)


def replay(scenario: Scenario, exporter: SpanExporter, *, run_id: str,
           variants: Iterable[Variant | str] = (), without: Iterable[Variant | str] = (),
           driver: Driver | None = None, metric_sink: MetricSink | None = None,
           fleet_health_factory: FleetHealthFactory | None = None,
           router_factory: RouterFactory | None = None,
           deadline_registry_factory: DeadlineRegistryFactory | None = None,
           agent_participant_factory: AgentParticipantFactory | None = None,
           epoch_ns: int | None = None, live: bool = False,
           backend: GenerationBackend | None = None) -> ReplayResult:
    """``live``/``epoch_ns``: the wall-clock mode (see ``Telemetry``); use it with a
    ``PacedDriver`` and an exporter that batches on its own (e.g. the OTLP exporter behind a
    BatchSpanProcessor). ``backend``: real model calls; ``driver`` must then be a
    ``PacedDriver`` with an inbox, or None (speed 1)."""
    if backend is not None:
        return _replay_on_backend(scenario, exporter, backend, run_id=run_id, variants=variants,
                                  without=without, driver=driver, metric_sink=metric_sink,
                                  fleet_health_factory=fleet_health_factory,
                                  router_factory=router_factory,
                                  deadline_registry_factory=deadline_registry_factory,
                                  agent_participant_factory=agent_participant_factory,
                                  epoch_ns=epoch_ns, live=live)
    return _replay(scenario, exporter, run_id=run_id, variants=variants, without=without,
                   driver=driver, metric_sink=metric_sink,
                   fleet_health_factory=fleet_health_factory, router_factory=router_factory,
                   deadline_registry_factory=deadline_registry_factory,
                   agent_participant_factory=agent_participant_factory, epoch_ns=epoch_ns,
                   live=live)


def _is_virtual(driver: Driver | None) -> bool:
    """Whether the run goes as fast as the CPU allows (no wall clock paces it)."""
    return driver is None or isinstance(driver, VirtualDriver)


def wall_clock_driver(speed: float = 1.0) -> PacedDriver:
    """A paced driver whose sleep wakes for real calls' answers (the backends' mode)."""
    inbox = Inbox()
    return PacedDriver(factor=speed, monotonic=time.monotonic, sleep=inbox.wait, inbox=inbox)


def _replay_on_backend(scenario: Scenario, exporter: SpanExporter, backend: GenerationBackend,
                       *, driver: Driver | None, **kw: Any) -> ReplayResult:
    if driver is None:
        driver = wall_clock_driver()
    if not isinstance(driver, PacedDriver) or driver.inbox is None:
        raise BackendError("a replay on a generation backend needs a PacedDriver with an inbox "
                           "(runner.wall_clock_driver)")
    try:
        info = backend.start()
        shards = max(scenario.config.fleet.shards, 1)
        if info.endpoints and len(info.endpoints) != shards:
            raise BackendError(f"scenario {scenario.name} has {shards} generation shard(s) but "
                               f"{len(info.endpoints)} --backend-url were given (one per shard)")
        holder: dict[str, GenerationSession] = {}

        def session(sched: Scheduler) -> GenerationSession:
            holder["s"] = GenerationSession(backend, inbox=driver.inbox, sched=sched,
                                            speed=driver.factor, info=info)
            return holder["s"]

        t0 = time.monotonic()
        result = _replay(scenario, exporter, driver=driver, generation=session, **kw)
        gen = holder["s"]
        gen.wall_s = time.monotonic() - t0
    finally:
        backend.close()
    return dataclasses.replace(result, stats={**result.stats, "generation": gen.summary()})


def _replay(scenario: Scenario, exporter: SpanExporter, *, run_id: str,
            variants: Iterable[Variant | str], without: Iterable[Variant | str],
            driver: Driver | None, metric_sink: MetricSink | None,
            fleet_health_factory: FleetHealthFactory | None,
            router_factory: RouterFactory | None,
            deadline_registry_factory: DeadlineRegistryFactory | None,
            agent_participant_factory: AgentParticipantFactory | None,
            epoch_ns: int | None, live: bool,
            generation: Callable[[Scheduler], GenerationSession] | None = None) -> ReplayResult:
    chosen = effective_variants(scenario, variants, without)
    tel = Telemetry(exporter=exporter, run_id=run_id, scenario=scenario.name, seed=scenario.seed,
                    metric_sink=metric_sink, live=live,
                    **({} if epoch_ns is None else {"epoch_ns": epoch_ns}))
    sched = Scheduler()
    world = World(scenario, variants=chosen, tel=tel, sched=sched,
                  fleet_health_factory=fleet_health_factory, router_factory=router_factory,
                  deadline_registry_factory=deadline_registry_factory,
                  agent_participant_factory=agent_participant_factory,
                  generation=None if generation is None else generation(sched))
    # a virtual-clock replay holds the collector back from drawing the workload to marking what
    # is still open, not phase by phase: each phase's end would otherwise start a young
    # collection that walks everything the run still holds (the workload, then the open runs
    # and the spans not yet exported), only to find it all alive
    with few_collections() if _is_virtual(driver) else nullcontext():
        try:
            # drawing the workload and marking what is still open at the end allocate in
            # bursts as large as the run's own, whatever paces the run
            with few_collections():
                world.schedule()
            (driver or VirtualDriver()).run(sched, scenario.horizon_s)
        finally:
            world.close()
        end = sched.now if sched.stopped else scenario.horizon_s
        sched.clock.set(max(sched.now, end))
        with few_collections():
            open_intervals = tel.finish()
    ctl = world.controller
    return ReplayResult(
        run_id=run_id, scenario=scenario.name, variants=ordered(chosen), seed=scenario.seed,
        simulated_s=end, events=sched.events_run, spans=tel.exported,
        open_intervals=open_intervals, raised=ctl.raised,
        stats={"committed": ctl.committed, "train_steps": ctl.train_steps,
               "completions": world.completions, "stalls": world.stalls,
               "snapshots": [o.value for o in world.snapshots.outcomes],
               "snapshots_skipped": world.snapshots.skipped})


class StoreMetricSink:
    """Writes gauge samples into a run store's ``metrics`` table through its writer."""

    def __init__(self, store: RunStore, run_id: str) -> None:
        self._writer = store.writer()
        self._run_id = run_id

    def __call__(self, points: Sequence[MetricPoint]) -> None:
        batch = RowBatch()
        for p in points:
            batch.add_row("metrics", run_id=self._run_id, service=p.service, name=p.name,
                          kind="gauge", ts_ns=p.ts_ns, step=p.step, value=p.value)
        self._writer.submit(batch, block=True)


def replay_into_store(scenario: Scenario, store: RunStore, *,
                      variants: Iterable[Variant | str] = (),
                      without: Iterable[Variant | str] = (), seed: int | None = None,
                      run_id: str | None = None, driver: Driver | None = None,
                      backend: GenerationBackend | None = None,
                      **factories: Any) -> ReplayResult:
    """``factories``: ``fleet_health_factory``, ``router_factory``,
    ``deadline_registry_factory``, passed on to ``replay``. The run's metadata records which
    generation backend served it (``recorded``: the captured timings) and, for a real one, the
    device, engine versions and per-kind latencies (``generation``)."""
    if seed is not None:
        scenario = dataclasses.replace(scenario, seed=seed)
    added, removed = _parse(variants), _parse(without)
    chosen = effective_variants(scenario, added, removed)
    run_id = run_id or default_run_id(scenario.name, scenario.seed, added, removed)
    metadata: dict[str, Any] = {"horizon_s": scenario.horizon_s,
                                "description": scenario.description,
                                "generation": {"backend": "recorded"}}

    def register() -> None:
        store.register_run(run_id, source=RunSource.REPLAY, scenario=scenario.name,
                           variants=ordered(chosen), seed=scenario.seed,
                           config=scenario.config_dict(), metadata=metadata,
                           origin_ns=VIRTUAL_EPOCH_NS)

    register()
    exporter = StoreSpanExporter(store)
    # a virtual-clock replay keeps the collector held back until the store's writer has
    # committed its last rows: a collection there (the writer allocates as it converts them)
    # would walk the rows still queued and the finished run's objects, young and old, to find
    # them alive or cyclic garbage that the one collection after this finds as well
    with few_collections() if backend is None and _is_virtual(driver) else nullcontext():
        result = replay(scenario, exporter, run_id=run_id, variants=chosen, without=removed,
                        driver=driver, backend=backend,
                        metric_sink=StoreMetricSink(store, run_id), **factories)
        exporter.force_flush()
    if exporter.dropped_spans:
        raise RuntimeError(f"{exporter.dropped_spans} span(s) could not be written")
    if "generation" in result.stats:
        metadata["generation"] = result.stats["generation"]
        register()
    return result
