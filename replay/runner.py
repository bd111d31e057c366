"""Run a scenario: build the world, drive the clock, export the spans, record the run.

``replay`` streams spans into any OTel ``SpanExporter``; ``replay_into_store`` also registers the
run (scenario, variants, seed, full config) in a run store, so detectors and later replays read
the thresholds this run actually used. A controller that raises ends the run early: that comes
back as data (``ReplayResult.raised``), not as an exception.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from rolloutscope.collectors.exporter import StoreSpanExporter
from rolloutscope.collectors.store import RunStore
from rolloutscope.collectors.vocabulary import RunSource
from rolloutscope.replay.engine import Driver, Scheduler, VirtualDriver
from rolloutscope.replay.scenario import Scenario
from rolloutscope.replay.sim.world import World
from rolloutscope.replay.telemetry import Telemetry
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


def default_run_id(scenario: str, seed: int, variants: Iterable[Variant]) -> str:
    names = ordered(variants)
    return f"{scenario}.s{seed}" + ("+" + "+".join(names) if names else "")


def replay(scenario: Scenario, exporter: SpanExporter, *, run_id: str,
           variants: Iterable[Variant | str] = (), driver: Driver | None = None) -> ReplayResult:
    chosen = parse_variants(v.value if isinstance(v, Variant) else v for v in variants)
    tel = Telemetry(exporter=exporter, run_id=run_id, scenario=scenario.name, seed=scenario.seed)
    sched = Scheduler()
    world = World(scenario, variants=chosen, tel=tel, sched=sched)
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


def replay_into_store(scenario: Scenario, store: RunStore, *,
                      variants: Iterable[Variant | str] = (), seed: int | None = None,
                      run_id: str | None = None, driver: Driver | None = None) -> ReplayResult:
    if seed is not None:
        scenario = dataclasses.replace(scenario, seed=seed)
    chosen = parse_variants(v.value if isinstance(v, Variant) else v for v in variants)
    run_id = run_id or default_run_id(scenario.name, scenario.seed, chosen)
    store.register_run(run_id, source=RunSource.REPLAY, scenario=scenario.name,
                       variants=ordered(chosen), seed=scenario.seed,
                       config=scenario.config_dict(),
                       metadata={"horizon_s": scenario.horizon_s,
                                 "description": scenario.description})
    exporter = StoreSpanExporter(store)
    result = replay(scenario, exporter, run_id=run_id, variants=chosen, driver=driver)
    exporter.force_flush()
    if exporter.dropped_spans:
        raise RuntimeError(f"{exporter.dropped_spans} span(s) could not be written")
    return result
