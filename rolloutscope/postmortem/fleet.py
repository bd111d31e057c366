"""P4: a generation shard quarantined, and how fast the fleet notices a dead one.

The measure is that of NVIDIA-NeMo/RL #3590's chaos harness: seconds from the fault to the first
failure that bounds the run and names its cause. With fleet health that is the quarantine (the
shard's move to ``dead``, after which ``GenerationFleetExhausted`` or the router's smaller serving
set follows); without it, only the retry budget bounds the run, at ``redispatch_exhausted``. Its
single-shard idle kill: 62 s with fleet health probing on the 30 s watchdog tick, 222 s
without (the budget of five 30 s tries and their backoff), ~15 s with probes every
``probe_interval_s`` = 5 s.

``probe_sweep`` replays the run's scenario (extracted from the run) over probe cadence x
``unhealthy_threshold`` with ``rolloutscope.replay.sweep``, serially, a run file per point. The
cadence is a variant, not a config value: without ``probe-at-probe-interval`` probes ride the
stall watchdog's tick (``config.watchdog.interval_s``); with it they run every
``probe_interval_s``. So the sweep is one grid per cadence mode plus the run without fleet
health at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import holoviews as hv
import pandas as pd

from rolloutscope.store import RunStore
from rolloutscope.postmortem.run_tables import PostmortemError, RunRef, origin_ns, seconds
from rolloutscope.replay.replay_capture import capture_from_store
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenario import Scenario
from rolloutscope.replay.sweep import run_sweep
from rolloutscope.replay.variants import Variant

hv.renderer("bokeh")  # the Bokeh backend's option names, without notebook side effects

FLEET_HEALTH = Variant.FLEET_HEALTH_ENABLED.value
PROBE_CADENCE = Variant.PROBE_AT_PROBE_INTERVAL.value
# the three ways a dead shard can be noticed, by what the replay had on
NO_FLEET_HEALTH = "no_fleet_health"
WATCHDOG_TICK = "watchdog_tick"
PROBE_INTERVAL = "probe_interval"
FLEET_METRICS = ("gen_fleet/shards/suspect", "gen_fleet/shards/dead", "gen_fleet/serving_shards",
                 "router/serving_backends")


def shard_stays(store: RunStore, run_id: str) -> pd.DataFrame:
    """Each shard's stays in each fleet-health state, what moved it there, its streaks."""
    origin = origin_ns(store, run_id)
    s = store.view("shard_states", run_id=run_id).sort_values(["shard_idx", "start_ns"])
    return pd.DataFrame({
        "shard": s.shard_idx.to_numpy(), "state": s.state.to_numpy(),
        "from_s": [seconds(v, origin) for v in s.start_ns],
        "to_s": [seconds(v, origin) for v in s.end_ns],
        "trigger": s.trigger.to_numpy(), "serving": s.serving.to_numpy(),
        "probe_failures": s.probe_failures.to_numpy(),
        "reported_failures": s.reported_failures.to_numpy(),
        "last_error": s.last_error.to_numpy()})


def faults(store: RunStore, run_id: str) -> pd.DataFrame:
    """The faults a replay injected (none in a live or imported run)."""
    origin = origin_ns(store, run_id)
    rows = store.query("SELECT at_ns, shard_idx, kind, detail FROM faults WHERE run_id = ? "
                       "ORDER BY at_ns", [run_id])
    return pd.DataFrame([(seconds(t, origin), shard, kind, detail)
                         for t, shard, kind, detail in rows],
                        columns=["at_s", "shard", "kind", "detail"])


def quarantines(store: RunStore, run_id: str) -> pd.DataFrame:
    """Each quarantine: from the fault (or the shard's first failure) to ``dead``."""
    origin = origin_ns(store, run_id)
    q = store.view("quarantine", run_id=run_id).sort_values("end_ns")
    return pd.DataFrame({
        "subject": q.subject.to_numpy(),
        "fault_s": [seconds(v, origin) for v in q.start_ns],
        "quarantined_s": [seconds(v, origin) for v in q.end_ns],
        "detection_s": q.detection_s.to_numpy(), "summary": q.summary.to_numpy()})


@dataclass(frozen=True, kw_only=True)
class Detection:
    """How long a run took from its first fault to a failure that bounds it and names why."""

    fault_s: float | None
    detected_s: float | None
    by: str | None  # quarantine | redispatch_exhausted | None (nothing bounded the run)

    @property
    def seconds(self) -> float | None:
        if self.fault_s is None or self.detected_s is None:
            return None
        return round(self.detected_s - self.fault_s, 3)


def detection(store: RunStore, run_id: str) -> Detection:
    origin = origin_ns(store, run_id)
    fault = store.query("SELECT min(at_ns) FROM faults WHERE run_id = ?", [run_id])[0][0]
    if fault is None:  # a live or imported run: the shard's first failure is the earliest sign
        fault = store.query("SELECT min(start_ns) FROM quarantine WHERE run_id = ?",
                            [run_id])[0][0]
    found = store.query(
        """SELECT signal, at_ns FROM (
               SELECT 'quarantine' AS signal, end_ns AS at_ns FROM quarantine WHERE run_id = ?
               UNION ALL
               SELECT 'redispatch_exhausted', end_ns FROM redispatch_exhausted
               WHERE run_id = ?)
           WHERE at_ns >= ? ORDER BY at_ns LIMIT 1""", [run_id, run_id, fault or 0])
    by, at = found[0] if found else (None, None)
    return Detection(fault_s=seconds(fault, origin), detected_s=seconds(at, origin), by=by)


@dataclass(frozen=True, kw_only=True)
class ProbeSweep:
    """Detection time over probe cadence x unhealthy_threshold, and without fleet health."""

    scenario: str
    table: pd.DataFrame  # one row per replay: cadence, probe_every_s, threshold, detection
    watchdog_interval_s: float

    def grid(self) -> pd.DataFrame:
        """Detection seconds, a row per cadence and a column per unhealthy_threshold."""
        probed = self.table[self.table.unhealthy_threshold.notna()]
        grid = probed.pivot_table(index="cadence", columns="unhealthy_threshold",
                                  values="detection_s", aggfunc="first", sort=False)
        grid.columns = [f"T={int(t)}" for t in grid.columns]
        return grid.rename_axis(index=None)

    def detection_s(self, mode: str, *, threshold: int | None = None,
                    every_s: float | None = None) -> float | None:
        """One replay's detection seconds: ``mode`` is ``NO_FLEET_HEALTH``, ``WATCHDOG_TICK``
        or ``PROBE_INTERVAL`` (with ``every_s``)."""
        rows = self.table[self.table["mode"] == mode]
        if threshold is not None:
            rows = rows[rows.unhealthy_threshold == threshold]
        if every_s is not None:
            rows = rows[rows.probe_every_s == every_s]
        if len(rows) != 1:
            raise PostmortemError(f"the sweep has {len(rows)} replays for {mode}, "
                                  f"threshold={threshold}, every_s={every_s}")
        return _maybe(rows.detection_s.iloc[0])


def _maybe(value: object) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _row(mode: str, cadence: str, probe_every_s: float | None, threshold: int | None,
         run_file: Path, raised: str | None, error: str | None = None) -> dict[str, object]:
    found = Detection(fault_s=None, detected_s=None, by=None)
    if error is None:
        with RunStore(run_file, read_only=True) as store:
            (run_id,) = store.run_ids()  # a sweep writes one run per file
            found = detection(store, run_id)
    return {"mode": mode, "cadence": cadence, "probe_every_s": probe_every_s,
            "unhealthy_threshold": threshold, "detection_s": found.seconds,
            "detected_by": found.by, "run_ended_by": raised, "error": error,
            "run_file": str(run_file)}


def scenario_of(run: RunRef) -> tuple[Scenario, tuple[str, ...]]:
    """The run's scenario as the replayer extracts it, and the fixes the run had on."""
    capture = capture_from_store(run.path, run.run_id)
    return capture.scenario, capture.variants


def probe_sweep(run: RunRef, out_dir: str | Path, *,
                probe_intervals_s: Sequence[float] = (5.0, 15.0),
                thresholds: Sequence[int] = (1, 2, 3)) -> ProbeSweep:
    """Replay ``run``'s scenario without fleet health, with probes on the watchdog tick and
    with probes every ``probe_intervals_s``, at each ``unhealthy_threshold``."""
    scenario, recorded = scenario_of(run)
    if not scenario.config.fleet.shards:
        raise PostmortemError(f"run {run.run_id} has no generation fleet to probe")
    others = tuple(v for v in recorded if v not in (FLEET_HEALTH, PROBE_CADENCE))
    out = Path(out_dir)
    tick = scenario.config.watchdog.interval_s
    out.mkdir(parents=True, exist_ok=True)
    with RunStore(out / "no-fleet-health.duckdb") as store:
        baseline = replay_into_store(scenario, store, variants=others)
        baseline_path = store.path
    rows = [_row(NO_FLEET_HEALTH, "no fleet health (retry budget only)", None, None, baseline_path,
                 baseline.raised)]
    on_tick = run_sweep(scenario, {"unhealthy_threshold": list(thresholds)},
                        out_dir=out / "watchdog-tick", variants=(*others, FLEET_HEALTH),
                        ray="none")
    rows += [_row(WATCHDOG_TICK, f"on the watchdog tick ({tick:g} s)", tick, p.unhealthy_threshold,
                  Path(p.run_file), p.raised, p.error)
             for p in on_tick.table.itertuples(index=False)]
    own = run_sweep(scenario, {"probe_interval_s": list(probe_intervals_s),
                               "unhealthy_threshold": list(thresholds)},
                    out_dir=out / "probe-interval",
                    variants=(*others, FLEET_HEALTH, PROBE_CADENCE), ray="none")
    rows += [_row(PROBE_INTERVAL, f"every probe_interval_s = {p.probe_interval_s:g} s",
                  p.probe_interval_s, p.unhealthy_threshold, Path(p.run_file), p.raised,
                  p.error)
             for p in own.table.itertuples(index=False)]
    table = pd.DataFrame(rows)
    return ProbeSweep(scenario=scenario.name, table=table, watchdog_interval_s=tick)


def serving_backends(store: RunStore, run_id: str) -> pd.DataFrame:
    """The router's serving set at each membership push where its size changed."""
    origin = origin_ns(store, run_id)
    rows = store.query("SELECT ts_ns, serving FROM router_pushes WHERE run_id = ? "
                       "ORDER BY ts_ns", [run_id])
    out, last = [], None
    for ts, count in rows:
        if count != last:
            out.append((seconds(ts, origin), last, count))
            last = count
    return pd.DataFrame(out, columns=["t_s", "serving_before", "serving"])


def detection_heatmap(sweep: ProbeSweep) -> hv.Overlay:
    """Detection seconds by cadence (rows) and unhealthy_threshold (columns), values written."""
    probed = sweep.table[sweep.table.unhealthy_threshold.notna()]
    data = pd.DataFrame({"unhealthy_threshold": probed.unhealthy_threshold.astype(int).astype(str),
                         "cadence": probed.cadence, "detection_s": probed.detection_s})
    heat = hv.HeatMap(data, kdims=["unhealthy_threshold", "cadence"], vdims=["detection_s"])
    labels = hv.Labels(data, kdims=["unhealthy_threshold", "cadence"], vdims=["detection_s"])
    return (heat * labels).opts(
        hv.opts.HeatMap(cmap="Reds", colorbar=True, width=560, height=260, tools=["hover"],
                        title=f"{sweep.scenario}: seconds from the kill to the quarantine"),
        hv.opts.Labels(text_font_size="10pt"))
