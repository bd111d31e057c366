"""``rl-log``: the RL controller's stdout → the spans and events live instrumentation emits.

Every line lands in ``logs`` (body = the raw line, with the span it produced); each recognised
line also becomes vocabulary spans/events carrying the raw line as ``log.record.original``:

- ``gen_fleet: shard i prev -> new (err)`` → the shard's ``rl.gen_fleet.shard_state`` stay in
  ``new`` (ending at its next transition, open at the end of the log) plus an
  ``rl.gen_fleet.transition`` event. A shard's first line also yields its stay in ``prev`` from
  the start of the log. The line does not say what moved the shard; the trigger is set only where
  the edge or the error names it (suspect → healthy: a probe success; → healthy from elsewhere:
  a refit; → restarting / stale / retired; a router-drained error: a reported failure).
- ``train step n/max`` → ``rl.train_step`` from the previous step boundary (the end of the
  previous step or of its weight sync) to the line; ``_sync_weights: sync done in t s`` →
  ``rl.weight_sync`` of t seconds ending at the line, with the trainer version of the step before
  it and the stale in-flight rollouts aborted during it. The controller syncs after every step,
  so a step below max that no sync-done line follows by the end of the log left a sync running:
  it is written as an open ``rl.weight_sync`` (the hung sync of P3).
- stall, environment-health, router-metrics and fleet-exhausted lines → events on an instant
  ``rl.stall_watchdog.tick`` (the watchdog prints them); a failed router update → an event on an
  instant ``rl.gen_fleet.probe_tick``; the rest (re-dispatches, dropped / skipped / substituted
  prompts, pump start and end, router messages, cleanup and ACK retries) → an event on an
  instant ``rolloutscope.log_line``, since the log does not say which rollout span they belong
  to.

Times come from the lines' own prefixes when the log has them (a line without one takes the
previous line's time). A log without any takes ``--start`` plus line order: 1 ms a line, plus
the durations the lines state — a sync done in t s lasts t s, and a stall line idle for s
seconds is placed at least s after the last progress — so the stall views see what the
controller saw. ``metadata.imports[].timestamps`` says which was used.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from rolloutscope.collectors.importers import log_lines as L
from rolloutscope.collectors.importers.report import ImportReport
from rolloutscope.collectors.importers.sink import CHUNK_ROWS, ImportSink
from rolloutscope.store import RowBatch
from rolloutscope.store.fit import ColumnFitError, time_problem
from rolloutscope.vocabulary import (
    Attr,
    EventName,
    FailureClass,
    ResourceAttr,
    ShardState,
    ShardTrigger,
    SpanName,
    StallAction,
)

SERVICE = "nemo-rl/controller"
SCOPE = "rolloutscope.importers.rl_log"
LINE_STEP_NS = 1_000_000  # line-order mode: 1 ms a line
_ROUTER_DRAINED = re.compile(r"router: \d+ failed request\(s\) to (\S+)")


class NoTimestampsError(ValueError):
    """The log has no timestamp prefix and no start time was given."""


# -- clocks --------------------------------------------------------------------------------
class _PrefixClock:
    """Times from the lines' prefixes; a line without one takes the previous line's time."""

    mode = "log_prefix"

    def __init__(self, first_ns: int) -> None:
        self._now = first_ns

    def line(self, ts_ns: int | None) -> int:
        if ts_ns is not None:
            self._now = ts_ns
        return self._now

    def lasting(self, seconds: float) -> tuple[int, int]:
        """(start, end) of something the current line says took ``seconds``, ending now."""
        return self._now - round(seconds * 1e9), self._now

    def not_before(self, ns: int) -> int:
        return self._now


class _LineOrderClock:
    """``--start`` plus line order, advanced by the durations the lines state."""

    mode = "line_order"

    def __init__(self, start_ns: int) -> None:
        self._now = start_ns - LINE_STEP_NS

    def line(self, ts_ns: int | None) -> int:
        self._now += LINE_STEP_NS
        return self._now

    def lasting(self, seconds: float) -> tuple[int, int]:
        start = self._now
        self._now += round(seconds * 1e9)
        return start, self._now

    def not_before(self, ns: int) -> int:
        self._now = max(self._now, ns)
        return self._now


def first_timestamp(paths: Iterable[Path]) -> int | None:
    """The first prefix timestamp in the files that the store can hold, or None if no line
    has one."""
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                ts = L.split_prefix(raw).ts_ns
                if ts is not None and time_problem(ts, "") is None:
                    return ts
    return None


# -- ids -----------------------------------------------------------------------------------
def _ids(run_id: str, file: str, line: int, role: str) -> tuple[str, str]:
    """(trace id, span id), stable for a given run, file, line and role."""
    digest = hashlib.blake2b(f"{run_id}\0{file}\0{line}\0{role}".encode(), digest_size=24)
    raw = digest.hexdigest()
    return raw[:32], raw[32:48]


@dataclass
class _Stay:
    trace_id: str
    span_id: str
    start_ns: int
    attrs: dict[str, Any]
    event: tuple[str, int, dict[str, Any]] | None


@dataclass
class _PendingSync:
    """The weight sync that follows a train step, until its sync-done line."""

    start_ns: int | None  # the train step line that started it
    step: int | None
    max_steps: int | None
    trainer_version: int | None
    ids: tuple[str, str] | None = None
    aborted: int = 0
    events: list[tuple[str, int, dict[str, Any]]] | None = None


class RlLogAssembler:
    """Turns recognised lines, in order, into rows. One per import (several files in order)."""

    def __init__(self, *, run_id: str, clock: _PrefixClock | _LineOrderClock,
                 report: ImportReport, service: str = SERVICE) -> None:
        self.run_id = run_id
        self.clock = clock
        self.report = report
        self.service = service
        self.resource = orjson.dumps({ResourceAttr.SERVICE_NAME: service,
                                      ResourceAttr.RUN_ID: run_id,
                                      ResourceAttr.RL_COMPONENT: "single_controller"}).decode()
        self.batch = RowBatch()
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.derived_config: dict[str, Any] = {}
        self._stays: dict[int, _Stay] = {}
        self._marked: set[str] = set()  # stays whose start marker was written (live follow)
        self._step_boundary: int | None = None
        self._last_progress: int | None = None
        self._sync: _PendingSync | None = None
        self._file = ""  # the name the rows carry (log.file.name)
        self._path = ""  # the path bad lines are reported under

    # -- feeding ---------------------------------------------------------------------------
    def begin_file(self, name: str, path: str) -> None:
        """Lines fed from now on come from ``path``; rows name it ``name``, which must be unique
        within the run (span ids derive from it and the line number)."""
        self._file, self._path = name, path

    def feed_file(self, path: Path, lines: Iterable[str], sink: ImportSink) -> None:
        self.begin_file(path.name, str(path))
        for number, raw in enumerate(lines, start=1):
            self.feed(number, raw)
            if self.batch.rows >= CHUNK_ROWS:
                sink.write(self.take_batch())

    def feed(self, number: int, raw: str) -> None:
        report = self.report
        report.lines_read += 1
        raw = raw.rstrip("\r\n")
        prefixed = L.split_prefix(raw)
        stamp_problem = None if prefixed.ts_ns is None else time_problem(prefixed.ts_ns,
                                                                         "its timestamp")
        # a timestamp the store cannot hold: the line keeps the previous line's time, and is
        # kept as a raw line only
        ts = self.clock.line(prefixed.ts_ns if stamp_problem is None else None)
        recognised = L.recognise(prefixed.message)
        kind, link = "unknown", (None, None)
        try:
            if stamp_problem is not None:
                kind = "bad_timestamp"
                report.add_bad(self._path, number, f"line is not placed in time: "
                                                   f"{stamp_problem}")
            elif recognised is None:
                report.unknown_lines += 1
            elif isinstance(recognised.message, L.Malformed):
                kind = recognised.kind
                report.add_bad(self._path, number, f"malformed {recognised.kind} line: "
                                                   f"{recognised.message.reason}")
            else:
                kind = recognised.kind
                report.count(kind)
                ts, link = self._handle(recognised.message, ts, number, raw)
            self._log_row(number, raw, ts, kind, prefixed, link)
        except ColumnFitError as exc:  # a value no check above foresaw: this line only
            report.add_bad(self._path, number, f"cannot be stored: {exc}")
            return
        self._saw(ts)

    def take_batch(self) -> RowBatch:
        batch, self.batch = self.batch, RowBatch()
        return batch

    # -- one message -----------------------------------------------------------------------
    def _handle(self, msg: L.LogMessage, ts: int, number: int,
                raw: str) -> tuple[int, tuple[str | None, str | None]]:
        src = {Attr.LOG_ORIGINAL: raw, Attr.LOG_FILE_NAME: self._file,
               Attr.LOG_LINE_NUMBER: number}
        if isinstance(msg, L.ShardTransition):
            return ts, self._transition(msg, ts, number, src)
        if isinstance(msg, L.TrainStep):
            return ts, self._train_step(msg, ts, number, src)
        if isinstance(msg, L.SyncDone):
            return self._sync_done(msg, number, src)
        if isinstance(msg, L.AbortedStale):
            return ts, self._aborted(msg, ts, number, src)
        if isinstance(msg, L.Stall):
            since = self._last_progress if self._last_progress is not None else self.first_ns
            if since is not None:
                ts = self.clock.not_before(since + round(msg.idle_s * 1e9))
            self.derived_config["max_num_steps"] = msg.max_steps
            if msg.stall_timeout_s is not None:
                self.derived_config["stall_timeout_s"] = msg.stall_timeout_s
            return ts, self._instant(SpanName.RL_STALL_WATCHDOG_TICK, EventName.STALL, ts, number, {
                Attr.STALL_IDLE_S: msg.idle_s, Attr.STALL_INFLIGHT: msg.inflight,
                Attr.STALL_COMMITTED: msg.committed, Attr.STALL_TRAIN_STEPS: msg.train_steps,
                Attr.STALL_MAX_STEPS: msg.max_steps,
                **({} if msg.stall_timeout_s is None
                   else {Attr.STALL_TIMEOUT_S: msg.stall_timeout_s}),
                Attr.STALL_ACTION: (StallAction.ABORT if msg.raised else StallAction.WARN).value,
                **src})
        return ts, self._instant_event(msg, ts, number, src)

    def _instant_event(self, msg: L.LogMessage, ts: int, number: int,
                       src: dict[str, Any]) -> tuple[str, str]:
        watchdog, probe, line = (SpanName.RL_STALL_WATCHDOG_TICK, SpanName.FLEET_PROBE_TICK,
                                 SpanName.LOG_LINE)
        match msg:
            case L.EnvHealth():
                return self._instant(watchdog, EventName.ENV_HEALTH_PROBLEM, ts, number, {
                    Attr.ENV_NAME: msg.env, Attr.ENV_PROBLEM: msg.problem, **src})
            case L.RouterMetricsUnavailable():
                return self._instant(watchdog, EventName.ROUTER_METRICS_UNAVAILABLE, ts, number,
                                     {**_error_attrs(msg.error), **src})
            case L.FleetExhausted():
                return self._instant(watchdog, EventName.FLEET_EXHAUSTED, ts, number, {
                    Attr.FLEET_SERVING_SHARDS: msg.serving,
                    Attr.FLEET_MIN_HEALTHY_SHARDS: msg.min_healthy_shards,
                    Attr.LOG_DETAIL: msg.fleet_state, **src})
            case L.ProbeRouterUpdateFailed():
                return self._instant(probe, EventName.ROUTER_UPDATE_FAILED, ts, number,
                                     {**_error_attrs(msg.error), **src})
            case L.RowRedispatch():
                return self._instant(line, EventName.ROW_REDISPATCH, ts, number, {
                    Attr.ROWS_MISSING: msg.rows, Attr.ROWS_TOTAL: msg.of,
                    Attr.ROW_ATTEMPT: msg.attempt, Attr.ROW_MAX_ATTEMPTS: msg.max_attempts,
                    **src})
            case L.PromptDropped():
                attrs = {Attr.PROMPT_IDX: msg.prompt_idx,
                         Attr.FAILURE_CLASS: FailureClass.INFRA.value,
                         Attr.ROLLOUT_INFRA_ATTEMPTS: msg.failures,
                         **_failure_attrs(msg.detail), **src}
                if msg.consecutive is not None:
                    attrs[Attr.CONSECUTIVE_DROPS] = msg.consecutive
                    attrs[Attr.MAX_CONSECUTIVE_DROPS] = msg.max_consecutive
                return self._instant(line, EventName.PROMPT_DROPPED, ts, number, attrs)
            case L.PromptSkipped():
                return self._instant(line, EventName.PROMPT_SKIPPED, ts, number, {
                    Attr.PROMPT_IDX: msg.prompt_idx, Attr.FAILURE_CLASS: FailureClass.DATA.value,
                    Attr.ROLLOUT_DATA_ATTEMPTS: msg.failures, **_failure_attrs(msg.detail),
                    **src})
            case L.PromptSubstituted():
                return self._instant(line, EventName.PROMPT_SUBSTITUTED, ts, number, {
                    Attr.TARGET_STEP: msg.target_step, Attr.LOG_DETAIL: msg.detail, **src})
            case L.RolloutPumpStarting():
                return self._instant(line, EventName.ROLLOUT_PUMP_STARTED, ts, number, src)
            case L.RolloutPumpCompleted():
                return self._instant(line, EventName.ROLLOUT_PUMP_COMPLETED, ts, number,
                                     {Attr.EPOCHS: msg.epochs, **src})
            case L.RouterListening():
                return self._instant(line, EventName.ROUTER_LISTENING, ts, number,
                                     {Attr.URL_FULL: msg.url, **src})
            case L.RouterIgnoring():
                return self._instant(line, EventName.ROUTER_IGNORED_PUSH, ts, number, {
                    Attr.ROUTER_IGNORED_COUNT: msg.count, Attr.LOG_DETAIL: msg.urls, **src})
            case L.GroupCleanupFailed():
                return self._instant(line, EventName.GROUP_CLEANUP_FAILED, ts, number, {
                    Attr.GROUP_ID: msg.group_id, **_error_attrs(msg.error), **src})
            case L.GymAckRetry():
                return self._instant(line, EventName.GYM_ACK_RETRY, ts, number,
                                     {Attr.LOG_DETAIL: msg.detail, **src})
        raise AssertionError(f"no rows for {type(msg).__name__}")  # every grammar is handled

    def _instant(self, span_name: str, event_name: str, ts: int, number: int,
                 attrs: dict[str, Any]) -> tuple[str, str]:
        trace_id, span_id = _ids(self.run_id, self._file, number, span_name)
        self._span(trace_id, span_id, span_name, ts, ts,
                   {Attr.LOG_FILE_NAME: self._file, Attr.LOG_LINE_NUMBER: number},
                   events=[(event_name, ts, attrs)])
        return trace_id, span_id

    # -- shard stays -----------------------------------------------------------------------
    def _transition(self, msg: L.ShardTransition, ts: int, number: int,
                    src: dict[str, Any]) -> tuple[str, str]:
        stay = self._stays.pop(msg.shard, None)
        if stay is not None:
            self._marked.discard(stay.span_id)
            self._close_stay(stay, ts)
        elif msg.previous is not None and self.first_ns is not None and self.first_ns < ts:
            # the stay this first line of the shard ends; the fleet builds every shard healthy
            trace_id, span_id = _ids(self.run_id, self._file, number, "previous_stay")
            attrs = {Attr.SHARD_IDX: msg.shard, Attr.FLEET_STATE: msg.previous}
            if msg.previous == ShardState.HEALTHY:
                attrs[Attr.FLEET_TRIGGER] = ShardTrigger.INITIAL.value
            self._span(trace_id, span_id, SpanName.SHARD_STATE, self.first_ns, ts, attrs)
        error_type, _ = L.split_error(msg.error)
        attrs: dict[str, Any] = {Attr.SHARD_IDX: msg.shard, Attr.FLEET_STATE: msg.state}
        if msg.previous is not None:
            attrs[Attr.FLEET_PREVIOUS_STATE] = msg.previous
        trigger = _trigger(msg)
        if trigger is not None:
            attrs[Attr.FLEET_TRIGGER] = trigger.value
        if msg.error is not None:
            attrs[Attr.FLEET_LAST_ERROR] = msg.error
            if error_type is not None:
                attrs[Attr.ERROR_TYPE] = error_type
            drained = _ROUTER_DRAINED.search(msg.error)
            if drained:
                attrs[Attr.BACKEND_URL] = drained.group(1)
        trace_id, span_id = _ids(self.run_id, self._file, number, SpanName.SHARD_STATE)
        self._stays[msg.shard] = _Stay(trace_id, span_id, ts, attrs,
                                       (EventName.FLEET_TRANSITION, ts, {**attrs, **src}))
        return trace_id, span_id

    def _close_stay(self, stay: _Stay, end_ns: int) -> None:
        self._span(stay.trace_id, stay.span_id, SpanName.SHARD_STATE, stay.start_ns, end_ns,
                   stay.attrs, events=[stay.event] if stay.event else ())

    # -- train steps and weight syncs ------------------------------------------------------
    def _train_step(self, msg: L.TrainStep, ts: int, number: int,
                    src: dict[str, Any]) -> tuple[str, str]:
        start = self._step_boundary if self._step_boundary is not None else self.first_ns
        trace_id, span_id = _ids(self.run_id, self._file, number, SpanName.RL_TRAIN_STEP)
        self._span(trace_id, span_id, SpanName.RL_TRAIN_STEP, ts if start is None else start, ts, {
            Attr.TRAIN_STEP: msg.step, Attr.TRAIN_MAX_STEPS: msg.max_steps,
            Attr.TRAINER_VERSION: msg.trainer_version, Attr.TRAIN_LAG: msg.lag, **src})
        self._step_boundary = self._last_progress = ts
        self.derived_config["max_num_steps"] = msg.max_steps
        pending = self._sync
        if pending is not None and pending.events:
            self._end_sync(pending, None, open_at_end=False)
        self._sync = _PendingSync(ts, msg.step, msg.max_steps, msg.trainer_version)
        return trace_id, span_id

    def _pending_sync(self, ts: int, number: int) -> _PendingSync:
        if self._sync is None:
            self._sync = _PendingSync(ts, None, None, None)
        if self._sync.ids is None:
            self._sync.ids = _ids(self.run_id, self._file, number, SpanName.RL_WEIGHT_SYNC)
        return self._sync

    def _aborted(self, msg: L.AbortedStale, ts: int, number: int,
                 src: dict[str, Any]) -> tuple[str, str]:
        sync = self._pending_sync(ts, number)
        sync.aborted += msg.rollouts
        sync.events = (sync.events or []) + [(EventName.WEIGHT_SYNC_ABORTED_STALE, ts, {
            Attr.ABORTED_STALE_INFLIGHT: msg.rollouts, **src})]
        return sync.ids

    def _sync_done(self, msg: L.SyncDone, number: int,
                   src: dict[str, Any]) -> tuple[int, tuple[str, str]]:
        start, end = self.clock.lasting(msg.seconds)
        sync = self._pending_sync(end, number)
        sync.start_ns = start
        ids = sync.ids
        self._end_sync(sync, end, open_at_end=False, extra=src)
        self._step_boundary = end
        return end, ids

    def _end_sync(self, sync: _PendingSync, end_ns: int | None, *, open_at_end: bool,
                  extra: dict[str, Any] | None = None) -> None:
        """Write a sync: finished (end_ns), or still running when the log ends (open)."""
        self._sync = None
        trace_id, span_id = sync.ids or _ids(self.run_id, self._file, 0, "open_sync")
        attrs: dict[str, Any] = dict(extra or {})
        if sync.trainer_version is not None:
            attrs[Attr.TRAINER_VERSION] = sync.trainer_version
        if sync.aborted:
            attrs[Attr.ABORTED_STALE_INFLIGHT] = sync.aborted
        start = sync.start_ns if sync.start_ns is not None else end_ns
        if end_ns is None and not open_at_end:
            # a step line came first: the sync ended unlogged, before it; keep only its events
            end_ns = start = max(ts for _, ts, _ in sync.events)
        if end_ns is None:
            self._open_span(trace_id, span_id, SpanName.RL_WEIGHT_SYNC, start, attrs,
                            sync.events or ())
        else:
            self._span(trace_id, span_id, SpanName.RL_WEIGHT_SYNC, start, end_ns, attrs,
                       events=sync.events or ())

    # -- live ------------------------------------------------------------------------------
    def mark_open_stays(self) -> None:
        """Write a start marker for each shard stay that began since the last call, so a live
        view shows a shard's current state before its next transition ends the stay. The
        stay's transition event is written once, with the finished span."""
        for stay in self._stays.values():
            if stay.span_id in self._marked:
                continue
            self._marked.add(stay.span_id)
            self.batch.add_span(
                run_id=self.run_id, trace_id=stay.trace_id, span_id=stay.span_id,
                parent_span_id=None, name=SpanName.SHARD_STATE, kind="INTERNAL",
                service=self.service, start_ns=stay.start_ns, end_ns=None, status_code="UNSET",
                status_message=None, attributes={**stay.attrs, Attr.OPEN_MARKER_FOR: stay.span_id},
                resource_json=self.resource, scope=SCOPE)

    # -- end of the log --------------------------------------------------------------------
    def finish(self) -> None:
        """Write what is still open when the log ends: shard stays, a running weight sync."""
        for stay in self._stays.values():
            self._open_span(stay.trace_id, stay.span_id, SpanName.SHARD_STATE, stay.start_ns,
                            stay.attrs, [stay.event] if stay.event else ())
        self._stays.clear()
        sync = self._sync
        if sync is not None:
            below_max = sync.step is not None and sync.max_steps is not None \
                and sync.step < sync.max_steps
            if sync.events or below_max:
                if sync.ids is None:
                    sync.ids = _ids(self.run_id, self._file, 0, "open_sync")
                self._end_sync(sync, None, open_at_end=True)
            self._sync = None

    # -- rows ------------------------------------------------------------------------------
    def _span(self, trace_id: str, span_id: str, name: str, start_ns: int, end_ns: int,
              attrs: dict[str, Any], events: Iterable[tuple[str, int, dict[str, Any]]] = ()) -> None:
        events = list(events)
        self.batch.add_span(
            run_id=self.run_id, trace_id=trace_id, span_id=span_id, parent_span_id=None,
            name=name, kind="INTERNAL", service=self.service, start_ns=start_ns, end_ns=end_ns,
            status_code="UNSET", status_message=None, attributes=attrs,
            resource_json=self.resource, scope=SCOPE, events=events)
        self.report.spans += 1
        self.report.events += len(events)

    def _open_span(self, trace_id: str, span_id: str, name: str, start_ns: int,
                   attrs: dict[str, Any], events: Iterable[tuple[str, int, dict[str, Any]]]) -> None:
        """An interval still open at the end of the log: its start marker, and its events
        (a marker's own events are not kept, so they are written on their own)."""
        self.batch.add_span(
            run_id=self.run_id, trace_id=trace_id, span_id=span_id, parent_span_id=None,
            name=name, kind="INTERNAL", service=self.service, start_ns=start_ns, end_ns=None,
            status_code="UNSET", status_message=None,
            attributes={**attrs, Attr.OPEN_MARKER_FOR: span_id}, resource_json=self.resource,
            scope=SCOPE)
        self.report.spans += 1
        for ev_name, ts, ev_attrs in events:
            self.batch.add_event(run_id=self.run_id, trace_id=trace_id, span_id=span_id,
                                 span_name=name, name=ev_name, ts_ns=ts, attributes=ev_attrs)
            self.report.events += 1

    def _log_row(self, number: int, raw: str, ts: int, kind: str, prefixed: L.Prefixed,
                 link: tuple[str | None, str | None]) -> None:
        self.batch.add_row(
            "logs", run_id=self.run_id, service=self.service, ts_ns=ts,
            severity=_severity(prefixed), body=raw, trace_id=link[0], span_id=link[1],
            attributes=orjson.dumps({Attr.LOG_FILE_NAME: self._file,
                                     Attr.LOG_LINE_NUMBER: number,
                                     Attr.LOG_KIND: kind}).decode(),
            resource=self.resource)
        self.report.logs += 1

    def _saw(self, ts: int) -> None:
        if self.first_ns is None or ts < self.first_ns:
            self.first_ns = ts
        if self.last_ns is None or ts > self.last_ns:
            self.last_ns = ts


def _trigger(msg: L.ShardTransition) -> ShardTrigger | None:
    state = msg.state
    if msg.previous is None:
        return ShardTrigger.INITIAL  # "none -> …": the record a shard gets when the fleet is built
    if state == ShardState.HEALTHY:
        return ShardTrigger.PROBE_SUCCESS if msg.previous == ShardState.SUSPECT \
            else ShardTrigger.REFIT
    if state == ShardState.RESTARTING:
        return ShardTrigger.RESTART
    if state == ShardState.STALE:
        return ShardTrigger.LOADED
    if state == ShardState.RETIRED:
        return ShardTrigger.RETIRE
    if msg.error is not None and _ROUTER_DRAINED.search(msg.error):
        return ShardTrigger.REPORTED_FAILURE
    return None  # a probe failure and a reported failure print the same line


def _error_attrs(error: str) -> dict[str, Any]:
    error_type, message = L.split_error(error)
    attrs: dict[str, Any] = {Attr.EXCEPTION_MESSAGE: error}
    if error_type is not None:
        attrs[Attr.ERROR_TYPE] = error_type
    return attrs


def _failure_attrs(detail: str) -> dict[str, Any]:
    error_type, _ = L.split_error(detail)
    attrs: dict[str, Any] = {Attr.FAILURE_DETAIL: detail}
    if error_type is not None:
        attrs[Attr.FAILURE_REASON] = error_type
    return attrs


def _severity(prefixed: L.Prefixed) -> str:
    if prefixed.level is not None:
        return "WARN" if prefixed.level == "WARNING" else prefixed.level
    message = prefixed.message.lstrip()
    if message.startswith(("WARNING:", "warn:")):
        return "WARN"
    if message.startswith("Traceback") or re.match(r"[A-Z]\w*(?:Error|Exhausted|Stall):", message):
        return "ERROR"
    return "INFO"


def read_lines(path: Path) -> Iterator[str]:
    """The file's lines; bytes that are not UTF-8 are replaced, never fatal."""
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        yield from fh


def import_rl_log(paths: list[Path], *, sink: ImportSink, report: ImportReport,
                  start_ns: int | None) -> RlLogAssembler:
    """Read the logs (in order, as one run) into ``sink``. Raises ``NoTimestampsError`` when no
    line has a timestamp and ``start_ns`` is None."""
    first = first_timestamp(paths)
    if first is not None:
        clock: _PrefixClock | _LineOrderClock = _PrefixClock(first)
    elif start_ns is not None:
        clock = _LineOrderClock(start_ns)
    else:
        raise NoTimestampsError("no line of the log has a timestamp; give --start ISO8601 so "
                                "that times can be taken from line order")
    asm = RlLogAssembler(run_id=sink.run_id, clock=clock, report=report)
    for path in paths:
        report.files.append(str(path))
        asm.feed_file(path, read_lines(path), sink)
    asm.finish()
    sink.write(asm.take_batch())
    sink.saw(asm.first_ns, asm.last_ns)
    return asm
