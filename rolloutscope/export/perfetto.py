"""A run, or a time window of it, as a Chrome trace-event JSON file that ui.perfetto.dev (and
chrome://tracing) opens: the dashboard's lanes as tracks, its gauges as counters.

The format is the Trace Event Format's JSON object form (``{"traceEvents": [...]}``):

- a process per component (``M`` ``process_name``): checkpoints, generation fleet, rollouts,
  controller, incidents;
- a thread per lane in it (``M`` ``thread_name``, ordered with ``thread_sort_index``): the
  checkpoint windows and one per participant, one per shard, one per rollout try (its parked
  stays on a lane of their own beside it, since a park can outlast the try and complete events
  on one thread must nest), the train steps and weight syncs, the incidents;
- ``X`` complete events for intervals (``ts``/``dur`` in microseconds since the run's origin),
  ``i`` instant events for fired deadlines, completions and instants;
- ``C`` counter events for the gauges: tries in flight, tries committed so far, serving shards.

Everything comes from the store's views (and ``all_spans`` for train steps and weight syncs); an
interval still open at the end of the capture ends at the run's last seen time, with
``"open": true`` in its args. Reads only the ground floor, so any reader can export.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from rolloutscope.store import RunStore
from rolloutscope.store.run_reads import origin_ns, require_run
from rolloutscope.vocabulary import SpanName

US = 1_000  # ns per microsecond
PROCESSES = {"checkpoints": 1, "generation fleet": 2, "rollouts": 3, "controller": 4,
             "incidents": 5}
COUNTER_POINTS = 5_000  # a gauge with more changes is sampled at this many instants


class WindowError(ValueError):
    """A --window that is not START:END seconds with START < END."""


@dataclass(frozen=True)
class Window:
    """Seconds since the run's origin; either end may be open (None)."""

    start_s: float | None = None
    end_s: float | None = None

    @classmethod
    def parse(cls, text: str | None) -> Window:
        if not text:
            return cls()
        start, sep, end = text.partition(":")
        if not sep:
            raise WindowError(f"window {text!r} is not START:END (seconds since the run's "
                              "start, e.g. 400:900 or 400: for everything after 400 s)")
        try:
            lo = float(start) if start.strip() else None
            hi = float(end) if end.strip() else None
        except ValueError:
            raise WindowError(f"window {text!r}: START and END must be numbers of seconds") \
                from None
        if lo is not None and hi is not None and hi <= lo:
            raise WindowError(f"window {text!r}: END must be after START")
        return cls(lo, hi)

    def bounds_ns(self, origin: int, last: int) -> tuple[int, int]:
        lo = origin + int(self.start_s * 1e9) if self.start_s is not None else origin - 10**18
        hi = origin + int(self.end_s * 1e9) if self.end_s is not None else last + 10**18
        return lo, hi


@dataclass(frozen=True)
class ExportSummary:
    events: int
    tracks: int
    counters: int
    path: Path


class _Tracks:
    """Thread ids per (process, lane), in first-seen order."""

    def __init__(self) -> None:
        self.ids: dict[tuple[int, str], int] = {}

    def tid(self, pid: int, lane: str) -> int:
        key = (pid, lane)
        if key not in self.ids:
            self.ids[key] = len(self.ids) + 1
        return self.ids[key]

    def metadata(self) -> Iterator[dict]:
        for (pid, lane), tid in self.ids.items():
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                   "args": {"name": lane}}
            yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                   "args": {"sort_index": tid}}


def _text(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA else str(v)


def _args(row: Any, names: Iterable[str]) -> dict:
    out = {}
    for n in names:
        v = getattr(row, n, None)
        if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
            continue
        out[n] = v.item() if hasattr(v, "item") else v
    return out


def trace_events(store: RunStore, run_id: str, window: Window = Window()) -> Iterator[dict]:
    """The trace events of one run (within ``window``), metadata last; see the module doc."""
    require_run(store, run_id)
    origin = origin_ns(store, run_id)
    # the run's last instant and each view's rows from the maintained rows where the store
    # keeps them (store.relation): a window's read prunes them to the window
    last = store.query(f"SELECT max(last_ns) FROM {store.relation('services')} WHERE run_id = ?",
                       [run_id])[0][0] or origin
    lo, hi = window.bounds_ns(origin, last)
    tracks = _Tracks()

    def view(name: str, start: str = "start_ns", end: str = "end_ns") -> pd.DataFrame:
        return store.query_df(  # names from this module, not from input
            f"SELECT * FROM {store.relation(name)} WHERE run_id = ? AND {start} <= ? "
            f"AND coalesce({end}, ?) >= ? ORDER BY {start}", [run_id, hi, last, lo])

    def ts(ns: Any) -> float:
        return (int(ns) - origin) / US

    def complete(pid: int, lane: str, name: str, start: Any, end: Any, cat: str,
                 args: dict) -> dict:
        is_open = end is None or end is pd.NA or (isinstance(end, float) and np.isnan(end))
        stop = last if is_open else int(end)
        return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tracks.tid(pid, lane),
                "ts": ts(start), "dur": max((stop - int(start)) / US, 0.0),
                "args": {**args, **({"open": True} if is_open else {})}}

    def instant(pid: int, lane: str, name: str, at: Any, cat: str, args: dict) -> dict:
        return {"ph": "i", "s": "t", "name": name, "cat": cat, "pid": pid,
                "tid": tracks.tid(pid, lane), "ts": ts(at), "args": args}

    ck = PROCESSES["checkpoints"]
    for r in view("checkpoint_windows").itertuples(index=False):
        yield complete(ck, "snapshot windows", f"snapshot {_text(r.checkpoint_id)}",
                       r.start_ns, r.end_ns, "checkpoint",
                       _args(r, ("checkpoint_id", "outcome", "duration_s")))
    for r in view("checkpoint_ops").itertuples(index=False):
        who = _text(r.participant_kind) + (f" {_text(r.instance)}" if _text(r.instance)
                                           and _text(r.instance) != _text(r.participant_kind)
                                           else "")
        yield complete(ck, who, f"{_text(r.op)} {_text(r.checkpoint_id)}", r.start_ns,
                       r.end_ns, "checkpoint",
                       _args(r, ("checkpoint_id", "op", "outcome", "code", "blockers",
                                 "span_id")))
    fleet = PROCESSES["generation fleet"]
    shards = view("shard_states")
    for r in shards.sort_values(["shard_idx", "start_ns"]).itertuples(index=False):
        yield complete(fleet, f"shard {int(r.shard_idx)}", _text(r.state), r.start_ns,
                       r.end_ns, "fleet",
                       _args(r, ("state", "trigger", "previous_state", "membership_epoch",
                                 "probe_failures", "reported_failures", "last_error",
                                 "span_id")))
    ro = PROCESSES["rollouts"]
    attempts = view("rollout_attempts")
    for r in attempts.itertuples(index=False):
        lane = (_text(r.capture_key) if r.dialect == "gym" and _text(r.capture_key)
                else f"{_text(r.rollout_id)} try {_text(r.attempt)}")
        yield complete(ro, lane, f"{lane} {_text(r.outcome)}", r.start_ns, r.end_ns,
                       "rollout", _args(r, ("rollout_id", "attempt", "group_id", "outcome",
                                            "failure_class", "failure_reason", "trace_id",
                                            "span_id")))
    groups = (attempts.dropna(subset=["prompt_idx"]).drop_duplicates("prompt_idx")
              .set_index("prompt_idx").rollout_id) if len(attempts) else pd.Series(dtype=str)
    for r in view("parked_intervals").itertuples(index=False):
        group = groups.get(r.prompt_idx, r.rollout_id) if pd.notna(r.prompt_idx) else \
            r.rollout_id
        yield complete(ro, f"{_text(group)} try {_text(r.attempt)} parked",
                       f"parked by {_text(r.checkpoint_id)}", r.start_ns, r.end_ns, "rollout",
                       _args(r, ("rollout_id", "attempt", "checkpoint_id", "boundary_state",
                                 "span_id")))
    for r in view("deadlines").itertuples(index=False):
        if pd.notna(r.fired_ns) and lo <= int(r.fired_ns) <= hi:
            yield instant(ro, f"{_text(r.rollout_id)} try {_text(r.attempt)}",
                          "deadline fired", r.fired_ns, "rollout",
                          _args(r, ("kind", "budget_s", "state_when_fired", "span_id")))
    for r in view("completions", "completed_ns", "completed_ns").itertuples(index=False):
        group = groups.get(r.prompt_idx, r.rollout_id) if pd.notna(r.prompt_idx) else \
            r.rollout_id
        acked = pd.notna(r.ack_ns)
        yield instant(ro, f"{_text(group)} try {_text(r.attempt)}",
                      "completed" if acked else "completed, unacknowledged", r.completed_ns,
                      "rollout", _args(r, ("rollout_id", "attempt", "ack_ns", "span_id")))
    ctl = PROCESSES["controller"]
    lanes = {SpanName.RL_TRAIN_STEP: "train steps", SpanName.RL_WEIGHT_SYNC: "weight syncs",
             SpanName.FAULT: "injected faults"}
    context = store.query_df(
        "SELECT name, span_id, start_ns, end_ns, attributes FROM all_spans WHERE run_id = ? "
        "AND name IN (SELECT unnest(?::VARCHAR[])) AND start_ns <= ? "
        "AND coalesce(end_ns, ?) >= ? ORDER BY start_ns",
        [run_id, list(lanes), hi, last, lo])
    for r in context.itertuples(index=False):
        attrs = json.loads(r.attributes) if isinstance(r.attributes, str) else {}
        yield complete(ctl, lanes[r.name], r.name, r.start_ns, r.end_ns, "controller",
                       {**{k: v for k, v in attrs.items() if k != "nemo.run.id"},
                        "span_id": r.span_id})
    inc_pid = PROCESSES["incidents"]
    for r in view("incidents").itertuples(index=False):
        args = _args(r, ("incident_id", "severity", "subject", "summary", "caused_by"))
        lane = f"{_text(r.kind)} {_text(r.subject)}"  # one each: incidents of a kind overlap
        if pd.notna(r.end_ns) and int(r.end_ns) == int(r.start_ns):
            yield instant(inc_pid, lane, _text(r.kind), r.start_ns, "incident", args)
        else:
            yield complete(inc_pid, lane, _text(r.kind), r.start_ns, r.end_ns, "incident",
                           args)
    yield from _counters(attempts, shards, origin=origin, last=last, lo=lo, hi=hi)
    for name, pid in PROCESSES.items():
        yield {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}
        yield {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}
    yield from tracks.metadata()


def _steps(ups: np.ndarray, downs: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray,
                                                                         np.ndarray]:
    """(instants, value) of a count that rises at ``ups`` and falls at ``downs``, within
    [lo, hi], sampled at COUNTER_POINTS instants when it changes more often."""
    ups, downs = np.sort(ups), np.sort(downs)
    at = np.unique(np.concatenate([ups, downs]))
    at = at[(at >= lo) & (at <= hi)]
    if len(at) > COUNTER_POINTS:
        at = np.linspace(at[0], at[-1], COUNTER_POINTS)
    value = np.searchsorted(ups, at, side="right") - np.searchsorted(downs, at, side="right")
    return at, value


def _counters(attempts: pd.DataFrame, shards: pd.DataFrame, *, origin: int, last: int,
              lo: int, hi: int) -> Iterator[dict]:
    def series(pid: int, name: str, key: str, at: np.ndarray, value: np.ndarray):
        for t, v in zip(at, value):
            yield {"ph": "C", "name": name, "pid": pid, "ts": (float(t) - origin) / US,
                   "args": {key: int(v)}}

    if len(attempts):
        starts = attempts.start_ns.to_numpy(dtype="float64")
        ends = pd.to_numeric(attempts.end_ns, errors="coerce").fillna(last) \
            .to_numpy(dtype="float64")
        at, value = _steps(starts, ends, lo, hi)
        yield from series(PROCESSES["rollouts"], "tries in flight", "in flight", at, value)
        done = attempts.outcome.isin(["committed", "finished"]).to_numpy()
        at, value = _steps(ends[done], np.array([], dtype="float64"), lo, hi)
        yield from series(PROCESSES["rollouts"], "tries committed", "committed", at, value)
    if len(shards):
        serving = shards[shards.serving.fillna(False).astype(bool)]
        at, value = _steps(serving.start_ns.to_numpy(dtype="float64"),
                           pd.to_numeric(serving.end_ns, errors="coerce").dropna()
                           .to_numpy(dtype="float64"), lo, hi)
        yield from series(PROCESSES["generation fleet"], "serving shards", "serving", at, value)


def write_trace(out: IO[str], events: Iterable[dict], *, run_id: str) -> tuple[int, int, int]:
    """Stream ``events`` into ``out`` as one JSON object; (events, thread tracks, counter
    events) written."""
    out.write('{"displayTimeUnit": "ms", "otherData": ')
    out.write(json.dumps({"run_id": run_id, "exporter": "rolloutscope"}))
    out.write(', "traceEvents": [\n')
    n = tracks = counters = 0
    for ev in events:
        out.write(("" if n == 0 else ",\n") + json.dumps(ev, default=str))
        n += 1
        tracks += ev["ph"] == "M" and ev["name"] == "thread_name"
        counters += ev["ph"] == "C"
    out.write("\n]}\n")
    return n, tracks, counters


def export_run(store: RunStore, run_id: str, path: str | Path, *,
               window: Window = Window()) -> ExportSummary:
    """Write one run (or a window of it) to ``path`` as Chrome trace-event JSON."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as out:
        n, tracks, counters = write_trace(out, trace_events(store, run_id, window),
                                          run_id=run_id)
    return ExportSummary(events=n, tracks=tracks, counters=counters, path=path)
