"""A run that was never pointed at a collector: import what it left behind, find its incidents.

``import_files`` runs the importer ``rolloutscope import`` runs, so a notebook imports exactly
as a user at a shell would and gets the same report. The evidence tables read what the importers wrote: the watchdog's gauges from
the logger's metrics (only the samples where one of them moved, since a stall is the absence of
movement) and the controller's own lines, kept verbatim with their file line numbers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rolloutscope.collectors.importers import files as importers
from rolloutscope.errors import InputError
from rolloutscope.store import RunStore
from rolloutscope.postmortem.run_tables import (
    PostmortemError,
    RunRef,
    origin_ns,
    scratch_dir,
    seconds,
)

# the watchdog's counters that make a stall (P3) and a quarantine (P4; docs/domain/incidents.md)
STALL_METRICS = ("rollout/committed_total", "rollout/train_steps", "rollout/inflight",
                 "rollout/idle_s")
PROGRESS_METRICS = STALL_METRICS[:3]  # rollout/idle_s moves at every sample of a stall
QUARANTINE_METRICS = ("gen_fleet/shards/suspect", "gen_fleet/shards/dead",
                      "gen_fleet/serving_shards", "router/serving_backends")
# the controller lines that tell each story, by the importer's line kind
STALL_LINES = ("train_step", "weight_sync_done", "stall")
QUARANTINE_LINES = ("shard_transition", "probe_router_update_failed", "router_ignoring",
                    "fleet_exhausted")


def import_files(kind: str, files: Sequence[str | Path], *, db: str | Path, run_id: str,
                 config: str | Path | None = None) -> dict[str, Any]:
    """What ``rolloutscope import KIND FILE... --db DB --run-id RUN_ID [--config C] --json``
    prints: the same importer, the same report."""
    user_config = None
    if config is not None:
        try:
            user_config = json.loads(Path(config).read_text())
        except (OSError, ValueError) as exc:
            raise PostmortemError(f"config {config}: {exc}") from None
    try:
        report = importers.import_files(kind, files, db=db, run_id=run_id,
                                        user_config=user_config)
    except InputError as exc:
        raise PostmortemError(str(exc)) from None
    return report.as_dict()


def import_run(*, controller_log: str | Path, metrics: str | Path,
               db: str | Path | None = None, workdir: str | Path | None = None,
               run_id: str = "imported") -> tuple[RunRef, list[dict[str, Any]]]:
    """The controller log, then the logger's metrics, into one run of ``db`` (by default
    ``imported.duckdb`` in ``workdir`` or a scratch directory); the run and both reports."""
    if db is None:
        db = scratch_dir(workdir) / "imported.duckdb"
    reports = [import_files("rl-log", [controller_log], db=db, run_id=run_id),
               import_files("rl-metrics", [metrics], db=db, run_id=run_id)]
    with RunStore(db, read_only=True) as store:
        path = store.path
    return RunRef(path=path, run_id=run_id), reports


def report_table(reports: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per import: what was read, what was written, what could not be used."""
    cols = ["kind", "lines_read", "spans", "events", "metrics", "logs", "unknown_lines",
            "bad_count"]
    return pd.DataFrame([{c: r[c] for c in cols} for r in reports], columns=cols)


def bad_records(reports: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Every quoted bad line or record, with its import kind (``file:line: reason``)."""
    return pd.DataFrame([{"kind": r["kind"], "where and why": b} for r in reports
                         for b in r["bad"]], columns=["kind", "where and why"])


def bad_lines(report: Mapping[str, Any]) -> frozenset[tuple[str, int]]:
    """(file name, line number) of each bad line an import report quotes."""
    out = set()
    for text in report["bad"]:
        for file in report["files"]:
            if text.startswith(f"{file}:"):
                number = text[len(file) + 1:].split(":", 1)[0]
                if number.isdigit():
                    out.add((Path(file).name, int(number)))
    return frozenset(out)


def log_lines(store: RunStore, run_id: str, kinds: Sequence[str], *,
              leave_out: Iterable[tuple[str, int]] = ()) -> pd.DataFrame:
    """The controller's lines of the given kinds, verbatim, in file order, less the lines in
    ``leave_out`` (file name, line number): the ones an import could not parse."""
    origin = origin_ns(store, run_id)
    placeholders = ", ".join("?" for _ in kinds)
    df = store.query_df(
        f"SELECT ts_ns, file, line, kind, body FROM log_lines "
        f"WHERE run_id = ? AND kind IN ({placeholders}) ORDER BY file, line", [run_id, *kinds])
    skip = set(leave_out)
    df = df[[(f, int(n)) not in skip for f, n in zip(df.file, df.line, strict=True)]]
    return pd.DataFrame({"file": df.file.to_numpy(), "line": df.line.to_numpy(),
                         "t_s": [seconds(v, origin) for v in df.ts_ns],
                         "kind": df.kind.to_numpy(), "body": df.body.to_numpy()})
