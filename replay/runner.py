"""Run a scenario: build the world, drive the clock, export the spans, record the run.

``replay`` streams spans into any OTel ``SpanExporter`` (and the watchdog's gauges into an
optional metric sink); ``replay_into_store`` also registers the run (scenario, variants, seed,
full config) in a run store and writes the gauges as ``metrics`` rows, so detectors and later
replays read the thresholds this run actually used. A controller that raises ends the run early:
that comes back as data (``ReplayResult.raised``), not as an exception.

The variants a run replays with are the scenario's own fixes, plus ``variants``, minus
``without``. The participant factories (``fleet_health_factory``, ``router_factory``,
``deadline_registry_factory``) default to the reference models.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from rolloutscope.collectors.exporter import StoreSpanExporter
from rolloutscope.collectors.store import RunStore
from rolloutscope.collectors.store.rows import RowBatch
from rolloutscope.collectors.vocabulary import RunSource
from rolloutscope.replay.engine import Driver, Scheduler, VirtualDriver
from rolloutscope.replay.scenario import Scenario
from rolloutscope.replay.sim.fleet import FleetHealthFactory, RouterFactory
from rolloutscope.replay.sim.world import DeadlineRegistryFactory, World
from rolloutscope.replay.telemetry import MetricPoint, MetricSink, Telemetry
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
           epoch_ns: int | None = None, live: bool = False) -> ReplayResult:
    """``live``/``epoch_ns``: the wall-clock mode (see ``Telemetry``); use it with a
    ``PacedDriver`` and an exporter that batches on its own (e.g. the OTLP exporter behind a
    BatchSpanProcessor)."""
    chosen = effective_variants(scenario, variants, without)
    tel = Telemetry(exporter=exporter, run_id=run_id, scenario=scenario.name, seed=scenario.seed,
                    metric_sink=metric_sink, live=live,
                    **({} if epoch_ns is None else {"epoch_ns": epoch_ns}))
    sched = Scheduler()
    world = World(scenario, variants=chosen, tel=tel, sched=sched,
                  fleet_health_factory=fleet_health_factory, router_factory=router_factory,
                  deadline_registry_factory=deadline_registry_factory)
    world.schedule()
    (driver or VirtualDriver()).run(sched, scenario.horizon_s)
    end = sched.now if sched.stopped else scenario.horizon_s
    sched.clock.set(max(sched.now, end))
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
                      **factories: Any) -> ReplayResult:
    """``factories``: ``fleet_health_factory``, ``router_factory``,
    ``deadline_registry_factory``, passed on to ``replay``."""
    if seed is not None:
        scenario = dataclasses.replace(scenario, seed=seed)
    added, removed = _parse(variants), _parse(without)
    chosen = effective_variants(scenario, added, removed)
    run_id = run_id or default_run_id(scenario.name, scenario.seed, added, removed)
    store.register_run(run_id, source=RunSource.REPLAY, scenario=scenario.name,
                       variants=ordered(chosen), seed=scenario.seed,
                       config=scenario.config_dict(),
                       metadata={"horizon_s": scenario.horizon_s,
                                 "description": scenario.description})
    exporter = StoreSpanExporter(store)
    result = replay(scenario, exporter, run_id=run_id, variants=chosen, without=removed,
                    driver=driver,
                    metric_sink=StoreMetricSink(store, run_id), **factories)
    exporter.force_flush()
    if exporter.dropped_spans:
        raise RuntimeError(f"{exporter.dropped_spans} span(s) could not be written")
    return result
