"""The run a postmortem works on, and the run-wide tables every postmortem starts from.

A notebook names a run store at the top. Given none, ``open_run`` replays the incident's
built-in scenario into a scratch directory, so the notebook runs anywhere and tells the
reference story. Times in every table here are seconds from the run's start as the incident
views count it (``run_thresholds.origin_ns``), so they match the numbers in incident summaries.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rolloutscope.store import RunStore, run_reads
from rolloutscope.store.run_reads import origin_ns, seconds
from rolloutscope.store.store import resolve_path
from rolloutscope.replay import scenarios
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenario import Scenario

class PostmortemError(Exception):
    """What the user asked for does not exist: a run, an incident, a kind of incident."""


@dataclass(frozen=True, kw_only=True)
class RunRef:
    """One run of a run store file. ``replayed_from`` names the built-in scenario ``open_run``
    replayed to make it, None for a run the user gave."""

    path: Path
    run_id: str
    replayed_from: str | None = None

    def open(self) -> RunStore:
        """The store, read-only: a postmortem never changes the run it examines."""
        return RunStore(self.path, read_only=True)


def scratch_dir(workdir: str | Path | None = None) -> Path:
    """``workdir`` (created if missing), else a fresh temporary directory."""
    if workdir is None:
        return Path(tempfile.mkdtemp(prefix="rolloutscope-postmortem-"))
    path = Path(workdir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def replay_scenario(scenario: str | Scenario, out: str | Path, *,
                    variants: Iterable[str] = (), run_id: str | None = None) -> RunRef:
    """Replay a built-in scenario (by name, or a ``Scenario``) into the store at ``out``."""
    sc = scenarios.get(scenario) if isinstance(scenario, str) else scenario
    with RunStore(out) as store:
        result = replay_into_store(sc, store, variants=tuple(variants), run_id=run_id)
        path = store.path
    return RunRef(path=path, run_id=result.run_id, replayed_from=sc.name)


def open_run(path: str | Path | None = None, run_id: str | None = None, *,
             scenario: str | Scenario, variants: Sequence[str] = (),
             workdir: str | Path | None = None) -> RunRef:
    """The run at ``path`` (``run_id``, or the store's only run); with no path, a replay of
    ``scenario`` written under ``workdir`` (a scratch directory by default)."""
    if path is None:
        name = scenario if isinstance(scenario, str) else scenario.name
        return replay_scenario(scenario, scratch_dir(workdir) / f"{name}.duckdb",
                               variants=variants)
    with RunStore(path, read_only=True) as store:
        runs = store.run_ids()
        resolved = store.path
    if run_id is None:
        if len(runs) != 1:
            raise PostmortemError(f"{resolved} holds {len(runs)} runs; name one of: "
                                  f"{', '.join(runs) or 'none'}")
        run_id = runs[0]
    elif run_id not in runs:
        raise PostmortemError(f"{resolved} holds no run {run_id!r}; runs: "
                              f"{', '.join(runs) or 'none'}")
    return RunRef(path=resolve_path(path), run_id=run_id)


INCIDENT_COLUMNS = ["start_s", "kind", "severity", "subject", "summary", "incident_id"]


def incident_table(store: RunStore, run_id: str, *, kinds: Iterable[str] = ()) -> pd.DataFrame:
    """The run's incidents in time order (only ``kinds`` if given), one sentence each."""
    run_reads.require_run(store, run_id)
    origin = origin_ns(store, run_id)
    df = store.view("incidents", run_id=run_id)
    wanted = set(kinds)
    if wanted:
        df = df[df.kind.isin(wanted)]
    out = pd.DataFrame({
        "start_s": [seconds(v, origin) for v in df.start_ns],
        "kind": df.kind.to_numpy(), "severity": df.severity.to_numpy(),
        "subject": df.subject.to_numpy(), "summary": df.summary.to_numpy(),
        "incident_id": df.incident_id.to_numpy()}, columns=INCIDENT_COLUMNS)
    return out.sort_values(["start_s", "kind", "subject"], na_position="last",
                           ignore_index=True)


def earliest_incident(store: RunStore, run_id: str, kind: str) -> dict[str, object] | None:
    """The run's first incident of ``kind`` as a record (``INCIDENT_COLUMNS``), None if none."""
    rows = incident_table(store, run_id, kinds=[kind])
    return rows.iloc[0].to_dict() if len(rows) else None


def watchdog_changes(store: RunStore, run_id: str, names: Sequence[str], *,
                     watch: Sequence[str] | None = None) -> pd.DataFrame:
    """The samples of ``names`` (one column each) at which any of ``watch`` (default: all of
    ``names``) changed, and the last sample."""
    origin = origin_ns(store, run_id)
    placeholders = ", ".join("?" for _ in names)
    long = store.query_df(
        f"SELECT ts_ns, step, name, value FROM metrics WHERE run_id = ? "
        f"AND name IN ({placeholders}) ORDER BY ts_ns", [run_id, *names])
    if not len(long):
        return pd.DataFrame(columns=["t_s", "step", *names])
    wide = long.pivot_table(index=["ts_ns", "step"], columns="name", values="value",
                            aggfunc="last").reindex(columns=list(names))
    wide = wide.reset_index().sort_values("ts_ns", ignore_index=True)
    values = wide[list(watch or names)]
    moved = values.ne(values.shift()).any(axis=1)
    moved.iloc[-1] = True
    out = wide[moved]
    out.insert(0, "t_s", [seconds(v, origin) for v in out.ts_ns])
    return out.drop(columns="ts_ns").reset_index(drop=True).rename_axis(columns=None)
