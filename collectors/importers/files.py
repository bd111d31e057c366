"""Import files into one run of a run store: the one entry point the command line and the
postmortem helpers share.

``import_files`` opens the store, picks the run (the one given, else the store's only run, else
the first file's name), runs the importer of ``kind`` and records the run with the config the
files stated merged under the user's. Problems with what was handed in are ``ImportInputError``
(a missing or unreadable file, a directory where a file was expected, no timestamps and no
``start_ns``);
bad lines inside a file never are: they are counted in the report with their file and line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rolloutscope.collectors.importers.report import ImportReport
from rolloutscope.errors import InputError
from rolloutscope.store import RunStore

KINDS = ("rl-log", "rl-metrics", "otlp-json")


class ImportInputError(InputError):
    """Files or options an import cannot use."""


def import_files(kind: str, files: Sequence[str | Path], *, db: str | Path,
                 run_id: str | None = None, start_ns: int | None = None,
                 start_text: str | None = None, interval_s: float = 30.0,
                 user_config: Mapping[str, Any] | None = None) -> ImportReport:
    """Import ``files`` (read in the order given) as ``kind`` into ``db``; the report."""
    if kind not in KINDS:
        raise ImportInputError(f"unknown import kind {kind!r}; known: {', '.join(KINDS)}")
    paths = [Path(p) for p in files]
    if not paths:
        raise ImportInputError("no files to import")
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise ImportInputError(f"no such file: {', '.join(missing)}")
    if kind != "rl-metrics":  # rl-metrics reads a directory as TensorBoard event files
        folders = [str(p) for p in paths if p.is_dir()]
        if folders:
            raise ImportInputError(f"{', '.join(folders)}: a directory, and {kind} reads "
                                   f"files; give the files in it")
    user_config = dict(user_config or {})
    try:
        return _import(kind, paths, db=db, run_id=run_id, start_ns=start_ns,
                       start_text=start_text, interval_s=interval_s, user_config=user_config)
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        where = getattr(exc, "filename", None) or "a file"
        detail = getattr(exc, "strerror", None) or str(exc)
        raise ImportInputError(f"cannot read {where}: {detail}") from None


def _import(kind: str, paths: list[Path], *, db: str | Path, run_id: str | None,
            start_ns: int | None, start_text: str | None, interval_s: float,
            user_config: dict[str, Any]) -> ImportReport:
    from rolloutscope.collectors.importers.otlp_json import import_otlp_json
    from rolloutscope.collectors.importers.rl_log import NoTimestampsError, import_rl_log
    from rolloutscope.collectors.importers.rl_metrics import (
        MissingStartError,
        import_rl_metrics,
    )
    from rolloutscope.collectors.importers.sink import ImportSink, default_run_id

    with RunStore(db) as store:
        run_id = run_id or default_run_id(store, paths[0])
        report = ImportReport(kind=kind, run_id=run_id)
        if kind == "otlp-json":
            sinks = import_otlp_json(paths, store=store, default_run_id=run_id, report=report)
            for sink in sinks.values():
                sink.finish(kind=kind, derived_config={}, user_config=user_config,
                            details={"files": report.files, "timestamps": "record"})
            report.run_id = ", ".join(sorted(sinks)) or run_id
            return report
        sink = ImportSink(store, run_id)
        try:
            if kind == "rl-log":
                asm = import_rl_log(paths, sink=sink, report=report, start_ns=start_ns)
                derived, details = asm.derived_config, {"timestamps": asm.clock.mode}
            else:
                modes = import_rl_metrics(paths, sink=sink, report=report,
                                          start_ns=start_ns, interval_s=interval_s)
                derived, details = {}, {"timestamps": modes, "interval_s": interval_s}
        except (NoTimestampsError, MissingStartError) as exc:
            raise ImportInputError(str(exc)) from None
        if start_ns is not None:
            details["start"] = start_text if start_text is not None else start_ns
        sink.finish(kind=kind, derived_config=derived, user_config=user_config,
                    details={"files": report.files, "lines": report.lines_read,
                             "unknown_lines": report.unknown_lines,
                             "bad_records": report.bad_count, **details})
    return report
