"""Where imported rows go: one run of a run store, registered as ``source=import``.

An import may be one of several into the same run (a controller log, then its metrics): the
run's config and metadata are merged, never replaced. Config precedence, lowest first: what the
run already recorded, what the files themselves state (e.g. ``max_num_steps`` from a
``train step N/M`` line), what the user gave with ``--config``. Every import appends one entry
to ``metadata.imports`` saying what was read and how its times were obtained.

The run's time range (``runs.first_seen_ns`` / ``last_seen_ns``, which ``run_thresholds``
reads) is widened to everything imported, metrics and logs included, so a metrics-only run has
a start and an end for the incident views.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rolloutscope.store import RowBatch, RunStore
from rolloutscope.vocabulary import RunSource

CHUNK_ROWS = 50_000  # rows per writer transaction


class ImportSink:
    """Appends batches to one run of an open store and tracks the time range written."""

    def __init__(self, store: RunStore, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self._writer = store.writer()

    def write(self, batch: RowBatch) -> None:
        if batch.rows:
            self._writer.write(batch)

    def saw(self, first_ns: int | None, last_ns: int | None = None) -> None:
        """Widen the run's time range to what the importer wrote."""
        for t in (first_ns, last_ns):
            if t is None:
                continue
            if self.first_ns is None or t < self.first_ns:
                self.first_ns = t
            if self.last_ns is None or t > self.last_ns:
                self.last_ns = t

    def finish(self, *, kind: str, derived_config: Mapping[str, Any],
               user_config: Mapping[str, Any], details: Mapping[str, Any]) -> None:
        """Flush, then merge config and metadata into the run and widen its time range."""
        self._writer.flush()
        store, run_id = self.store, self.run_id
        rows = store.query("SELECT config, metadata FROM runs WHERE run_id = ?", [run_id])
        old_config = json.loads(rows[0][0]) if rows and rows[0][0] else {}
        old_meta = json.loads(rows[0][1]) if rows and rows[0][1] else {}
        config = {**old_config, **derived_config, **user_config}
        imports = list(old_meta.get("imports", []))
        imports.append({"kind": kind, **details})
        store.register_run(run_id, source=RunSource.IMPORT, config=config,
                           metadata={**old_meta, "imports": imports})
        if self.first_ns is not None:
            with store.cursor() as cur:
                cur.execute(
                    """UPDATE runs SET
                         first_seen_ns = least(coalesce(first_seen_ns, ?), ?),
                         last_seen_ns = greatest(coalesce(last_seen_ns, ?), ?)
                       WHERE run_id = ?""",
                    [self.first_ns, self.first_ns, self.last_ns, self.last_ns, run_id])


def default_run_id(store: RunStore, first_file: str | Path) -> str:
    """The store's only run if it has exactly one, else the first file's name without suffixes."""
    runs = store.run_ids()
    if len(runs) == 1:
        return runs[0]
    name = Path(first_file).name
    return name.split(".", 1)[0] or name
