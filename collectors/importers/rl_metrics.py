"""``rl-metrics``: the experiment logger's scalars → ``metrics`` (kind ``scalar``, with step).

Two sources, told apart by name:

- **TensorBoard** event files (``events.out.tfevents.*``, or a directory searched for them), read
  with TensorBoard's own ``EventFileLoader``. Scalars written as ``simple_value`` (PyTorch's
  ``SummaryWriter``, which NeMo-RL's logger uses) and as one-element tensors (TF2 summaries)
  both count. The logger writes one ``add_scalar`` per key, so the keys of one ``log_metrics``
  call carry wall times microseconds apart; consecutive scalars of one step within
  ``CALL_WINDOW_S`` of the first are stamped with the first one's time, so that samples of one
  watchdog tick line up (``router_fleet_divergence`` compares them at equal times).
- **JSON lines**, any other file. Each line is one object, in one of two shapes:

  - wide, one logger call: ``{"step": 12, "rollout/committed_total": 10, ...}``; every numeric
    field that is not a step or time field is a metric;
  - long, one scalar: ``{"step": 12, "name": "rollout/committed_total", "value": 10}``
    (``tag`` or ``key`` may stand for ``name``).

  The step is ``step`` (or wandb's ``_step``); the time is ``wall_time``, ``timestamp``,
  ``time``, ``ts`` or ``_timestamp`` — epoch seconds, or an ISO 8601 string. A file whose
  records carry no time needs ``--start``: record k is then at start + k × ``interval_s``
  (default 30 s, the watchdog's interval, since the watchdog is what logs every tick).
  ``metadata.imports[].timestamps`` says which was used.

A line that is not a JSON object, has no step, or has no numeric value is a bad record (file and
line); strings, nulls and nested values inside a good record are skipped, not errors.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from rolloutscope.collectors.importers.log_lines import TimeOutOfRange, parse_iso8601
from rolloutscope.collectors.importers.report import ImportReport
from rolloutscope.collectors.importers.sink import CHUNK_ROWS, ImportSink
from rolloutscope.store import RowBatch
from rolloutscope.store.fit import INT64_MAX, INT64_MIN, MAX_NS, ColumnFitError

SERVICE = "nemo-rl/controller"
KIND = "scalar"
CALL_WINDOW_S = 1.0
DEFAULT_INTERVAL_S = 30.0
TB_MARKER = "tfevents"

_STEP_KEYS = ("step", "_step")
_TIME_KEYS = ("wall_time", "timestamp", "time", "ts", "_timestamp")
_NAME_KEYS = ("name", "tag", "key")
_IGNORED_KEYS = frozenset({*_STEP_KEYS, *_TIME_KEYS, "_runtime", "epoch"})
_PAST = "is past the latest time the store holds (2262-04-11)"


class MissingStartError(ValueError):
    """A JSON-lines file without times, and no ``--start``."""


def is_tensorboard(path: Path) -> bool:
    return path.is_dir() or TB_MARKER in path.name


def tensorboard_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob(f"*{TB_MARKER}*") if p.is_file())
    return [path]


class _Rows:
    """Metric rows into the sink, in chunks, counting and tracking the time range."""

    def __init__(self, sink: ImportSink, report: ImportReport) -> None:
        self.sink, self.report = sink, report
        self.batch = RowBatch()
        self.first_ns: int | None = None
        self.last_ns: int | None = None

    def add(self, name: str, ts_ns: int, step: int | None, value: float) -> None:
        self.batch.add_row("metrics", run_id=self.sink.run_id, service=SERVICE, name=name,
                           kind=KIND, ts_ns=ts_ns, step=step, value=value)
        self.report.metrics += 1
        if self.first_ns is None or ts_ns < self.first_ns:
            self.first_ns = ts_ns
        if self.last_ns is None or ts_ns > self.last_ns:
            self.last_ns = ts_ns
        if self.batch.rows >= CHUNK_ROWS:
            self.flush()

    def flush(self) -> None:
        self.sink.write(self.batch)
        self.batch = RowBatch()
        self.sink.saw(self.first_ns, self.last_ns)


# -- TensorBoard -----------------------------------------------------------------------------
def _tb_scalar(value: Any) -> float | None:
    from tensorboard.util import tensor_util

    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        try:
            array = tensor_util.make_ndarray(value.tensor)
        except (TypeError, ValueError):
            return None
        if array.size == 1 and array.dtype.kind in "fiub":
            return float(array.reshape(()).item())
    return None


class _DamageLog(logging.Handler):
    """TensorBoard's loader stops at a damaged or truncated record and says so only in a debug
    log line (a file being written ends the same way); this catches that line."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.problems: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Truncated record"):
            self.problems.append(str(record.args[-1]) if record.args else record.getMessage())


def import_tensorboard(path: Path, rows: _Rows, report: ImportReport) -> None:
    from tensorboard.util import tb_logging

    tb_logger = tb_logging.get_logger()
    damage, level = _DamageLog(), tb_logger.level
    tb_logger.addHandler(damage)
    tb_logger.setLevel(logging.DEBUG)
    try:
        records = _read_tensorboard(path, rows, report)
    finally:
        tb_logger.removeHandler(damage)
        tb_logger.setLevel(level)
    for problem in damage.problems:
        report.add_bad(str(path), records + 1, f"damaged or truncated event record after "
                                               f"record {records} ({problem})")


def _read_tensorboard(path: Path, rows: _Rows, report: ImportReport) -> int:
    """Reads the file's scalars; returns how many event records were read."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    name = str(path)
    call_step: int | None = None
    call_wall = call_first = 0.0
    record = 0
    try:
        for event in EventFileLoader(name).Load():
            record += 1
            report.lines_read += 1
            if event.WhichOneof("what") != "summary":
                continue
            wall = event.wall_time
            if call_step != event.step or wall - call_first > CALL_WINDOW_S:
                call_step, call_first, call_wall = event.step, wall, wall
            for value in event.summary.value:
                number = _tb_scalar(value)
                if number is None:
                    continue  # histograms, images, text: not scalars
                if not math.isfinite(wall) or wall <= 0:
                    report.add_bad(name, record, f"scalar {value.tag!r} has no wall time")
                    continue
                if not call_wall * 1e9 <= MAX_NS:
                    report.add_bad(name, record, f"scalar {value.tag!r}: wall time {wall:g} s "
                                                 f"{_PAST}")
                    continue
                try:
                    rows.add(value.tag, round(call_wall * 1e9), int(event.step), number)
                except ColumnFitError as exc:
                    report.add_bad(name, record, f"scalar {value.tag!r} cannot be stored: "
                                                 f"{exc}")
                    continue
                report.count("tensorboard_scalar")
    except Exception as exc:  # noqa: BLE001 - a damaged file ends its own read, never the import
        report.add_bad(name, record + 1, f"unreadable event record ({type(exc).__name__}: {exc})")
    return record


# -- JSON lines ------------------------------------------------------------------------------
def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _time_ns(record: dict[str, Any]) -> int | None | str:
    """Epoch ns of the record's time field, None if it has none, or the problem as text."""
    for key in _TIME_KEYS:
        if key not in record:
            continue
        value = record[key]
        if isinstance(value, str):
            try:
                return parse_iso8601(value)
            except TimeOutOfRange as exc:
                return f"{key}: {exc}"
            except ValueError:
                return f"{key} {value[:40]!r} is not ISO 8601"
        number = _number(value)
        if number is None or number <= 0:
            return f"{key} {str(value)[:40]!r} is not a time"
        if not number * 1e9 <= MAX_NS:
            return f"{key} {str(value)[:40]} s {_PAST}"
        return round(number * 1e9)
    return None


def _step(record: dict[str, Any]) -> int | None | str:
    for key in _STEP_KEYS:
        if key in record:
            value = record[key]
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value != int(value):
                return f"{key} {str(value)[:40]!r} is not an integer"
            if not INT64_MIN <= int(value) <= INT64_MAX:
                return f"{key} {str(value)[:40]} is out of range for a step (BIGINT)"
            return int(value)
    return None


def _samples(record: dict[str, Any]) -> list[tuple[str, float]] | str:
    for key in _NAME_KEYS:
        if key in record and "value" in record:
            name, value = record[key], _number(record["value"])
            if not isinstance(name, str) or not name:
                return f"{key} is not a metric name"
            if value is None:
                return f"value of {name!r} is not a finite number"
            return [(name, value)]
    samples = []
    for key, value in record.items():
        if key in _IGNORED_KEYS:
            continue
        number = _number(value)
        if number is not None:
            samples.append((key, number))
    return samples or "no numeric metric in the record"


def json_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                yield number, line


def import_json_lines(path: Path, rows: _Rows, report: ImportReport, *, start_ns: int | None,
                      interval_s: float) -> str:
    """Reads one file; returns how its times were obtained ("record" or "line_order")."""
    name = str(path)
    mode: str | None = None
    index = 0
    for number, line in json_lines(path):
        report.lines_read += 1
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            report.add_bad(name, number, f"not JSON ({exc})")
            continue
        if not isinstance(record, dict):
            report.add_bad(name, number, f"a JSON {type(record).__name__}, not an object")
            continue
        step, ts = _step(record), _time_ns(record)
        problem = next((p for p in (step, ts) if isinstance(p, str)), None)
        if problem is None and step is None:
            problem = "no step (step or _step)"
        if problem is None and mode is None:
            mode = "record" if ts is not None else "line_order"
            if mode == "line_order" and start_ns is None:
                raise MissingStartError(f"{name}: records carry no time field "
                                        f"({', '.join(_TIME_KEYS)}); give --start ISO8601")
        if problem is None and mode == "record" and ts is None:
            problem = "no time field, unlike the records before it"
        samples = _samples(record) if problem is None else problem
        if isinstance(samples, str):
            report.add_bad(name, number, samples)
            continue
        if mode == "line_order":
            offset = index * interval_s * 1e9
            if not start_ns + offset <= MAX_NS:
                report.add_bad(name, number, f"record {index} of line order (--start plus "
                                             f"{index} x {interval_s:g} s) {_PAST}")
                index += 1
                continue
            ts = start_ns + round(offset)
        index += 1
        report.count("jsonl_record")
        for metric, value in samples:
            try:
                rows.add(metric, ts, step, value)
            except ColumnFitError as exc:
                report.add_bad(name, number, f"{metric!r} cannot be stored: {exc}")
    return mode or "record"


def import_rl_metrics(paths: list[Path], *, sink: ImportSink, report: ImportReport,
                      start_ns: int | None, interval_s: float = DEFAULT_INTERVAL_S
                      ) -> dict[str, str]:
    """Reads every file into ``sink``; returns, per file, how its times were obtained."""
    rows = _Rows(sink, report)
    modes: dict[str, str] = {}
    for path in paths:
        if is_tensorboard(path):
            files = tensorboard_files(path)
            if not files:
                report.add_bad(str(path), 0, "no TensorBoard event files (*tfevents*) in it")
            for file in files:
                report.files.append(str(file))
                import_tensorboard(file, rows, report)
                modes[str(file)] = "tensorboard_wall_time"
        else:
            report.files.append(str(path))
            modes[str(path)] = import_json_lines(path, rows, report, start_ns=start_ns,
                                                 interval_s=interval_s)
    rows.flush()
    return modes
