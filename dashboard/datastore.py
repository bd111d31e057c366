"""DataStore: one run's view rows and the user's filters, for every dashboard view.

Rule: the DataStore reads only the store's SQL views (the model views, ``incidents`` and
``run_thresholds``), one query per view per refresh, and derives nothing the views already say.
What it adds is selection: which run, which incident, which rollouts to draw. Views watch its
parameters and only draw.

Refresh is incremental for live mode: each tick asks every interval view only for rows that
started, ended or are still open since a watermark (the latest time seen, less a margin for late
arrivals), and replaces rows by key. Rows that arrive later than the margin are picked up by a
full reload every ``FULL_RELOAD_EVERY`` ticks. The views without a time filter (incidents,
thresholds) are re-read whole at most every ``INCIDENTS_EVERY`` ticks, and only when the run
grew since their last read (a model view changed, or the run's ``last_seen_ns`` moved): the
incident views run every detector on each read (a few hundred ms on a large run), which a 1.5 s
tick cannot afford each time, an incident a few seconds late is still news, and a run that
stopped growing cannot have new incidents. Those re-reads run on a background thread, started
once the tick that asks for them has read and redrawn (between ticks, not against them), and
land on the tick after they finish, so a tick never waits on the detectors; only a full reload
reads them inline. Whichever way, they keep to ``WHOLE_READ_SHARE`` (a tenth) of the time per
dashboard process: after a read of c seconds the next waits 9c (a live 10^8-span run's
detectors take seconds, computed by the collector that serves the run), and a full reload
keeps the frames it has until then. A large live run's first read of them is in the background
too: the page opens without its incidents, says it is reading them, and shows them on the tick
after they are read. ``frame_versions`` counts changes per frame, so a view
redraws only the elements whose frames changed.

A view that a store file predates (``incidents`` and ``run_thresholds`` arrived after the first
files were written, ``serving_samples`` is proposed) reads as an empty frame with its columns;
once the file has it, it is used. Every frame has its view's columns (read from the store before
any row is), whether the store holds no run yet, a run with no rows in that view, or none at all:
readers never meet a frame without the columns they draw.

Window mode (docs/dashboard.md#window-mode): a run of more spans than ``window_spans`` has its
interval views (those with time columns) read for ``window`` only, the rows overlapping
[lo, hi): the run's last ``window_s`` when it opens (moving with the head on each full reload,
live), or, once a time range outside it is shown (an incident, a link, a stretch of the
whole-run picture), that range widened to ``window_s`` and cut to ``window_max_s``. A live tick
reads within it. A window's reads are shared by the server's sessions like whole reads (the
window's bounds are parameters of the read). The run's own first and last instants come from
its ``runs`` row, not the frames.

A store with no run yet (a collector before its first span) is a state, not an error:
``state()`` says which, and in live mode each tick looks for the first run until one arrives.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
import param

from rolloutscope.store import RunStore
from rolloutscope.store import views as store_views
from rolloutscope.store.errors import StoreError
from rolloutscope.store.store import TEXT, as_text
from rolloutscope.vocabulary import SpanName

from rolloutscope.dashboard import run_picture
from rolloutscope.dashboard.rollout_rows import RolloutRows
from rolloutscope.dashboard.defaults import WINDOW_MAX_MINUTES
from rolloutscope.dashboard.shared import (
    DEFAULT_READ_TIMEOUT_S,
    DashboardLimits,
    ReadTimeout,
    SharedReads,
    new_token,
    shareable,
    timed_frame,
)
from rolloutscope.dashboard.rollout_rows import listish
from rolloutscope.dashboard.selection import is_in, rows_where
from rolloutscope.dashboard.timeline_plot import (
    EVENT_COLUMNS,
    SPAN_COLUMNS,
    pad_range,
    rollout_gauges_frame,
)

log = logging.getLogger(__name__)

FULL_RELOAD_EVERY = 30
INCIDENTS_EVERY = 4
# one thread for every session's background reads of the whole views: they queue, not pile up
_WHOLE_READS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rolloutscope-incidents")
READING_INCIDENTS = ("Reading the incidents: the detectors run over the whole run (seconds at "
                     "this size); they appear here when read.")
# the reads of the whole views (the incident detectors, a few seconds over a live 10^8-span run,
# computed by the collector that serves the run) take at most this share of the time, counted
# per dashboard process: after one that took c seconds the next starts no sooner than
# c * (1 / share - 1) later. A small run's take milliseconds and are not held back.
WHOLE_READ_SHARE = 0.1


class _Pace:
    """When the next read of the whole views may start (``WHOLE_READ_SHARE``)."""

    def __init__(self, share: float) -> None:
        self.share = share
        self._next = 0.0
        self._lock = threading.Lock()

    def due(self) -> bool:
        with self._lock:
            return time.monotonic() >= self._next

    def took(self, seconds: float) -> None:
        with self._lock:
            self._next = time.monotonic() + seconds * (1 / self.share - 1)


_WHOLE_PACE = _Pace(WHOLE_READ_SHARE)
LATE_MARGIN_NS = 30 * 10**9  # rows ending this long before the latest time seen are re-read


@dataclass(frozen=True)
class ViewSpec:
    """How the DataStore reads one store view."""

    name: str
    key: tuple[str, ...]  # identifies a row across refreshes
    times: tuple[str, ...]  # (start, end) columns for the incremental filter; () = whole view
    columns: tuple[str, ...] = ()  # for an absent optional view: the frame's columns
    optional: bool = False
    # read only for a run with Gym rollout rows: in an RL run every Gym rollout is a row of an
    # RL try, and a large run's Gym detail (a model call per turn) is millions of rows
    gym_only: bool = False
    rarely: bool = False  # a whole view read on full reloads only (what the run holds)
    cap: int | None = None  # at most this many rows, the latest
    # span names some of a capped view's rows are, one row each, with the span's start_ns: the
    # cap-th newest of those spans bounds the newest cap rows from below, so a capped read
    # computes the view from there on instead of over the whole run (see ``_cap_floor``)
    anchor: tuple[str, ...] = ()
    # what "the latest" rows of a capped view are: its ORDER BY (names from this file only)
    latest: str = "start_ns DESC, span_id"
    # a capped view's time column: the floor and, in window mode, the window bound it
    at: str = "start_ns"


MAX_DETAIL_ROWS = 20_000  # Gym rollouts / model calls a dashboard holds (the latest)
# window mode up to the run's head: a capped view (the Gym tables, the engine views) holds its
# latest rows that start from lo - CAP_MARGIN_NS on, so a row that began up to this long before
# the window (a Gym rollout still running into it) is listed, and no read reaches further back
# (a window that ends before the head: those of the window a session opens on, ``_cap_bounds``)
CAP_MARGIN_NS = 10 * 60 * 10**9
# the width of the store's kept span counts (``d_span_buckets``, derived.BUCKET_NS)
SPAN_BUCKET_NS = 60 * 10**9
# a store that keeps no per-second sums (a lake, an older file) has its whole-run picture summed
# from the views' rows up to this many tries
PICTURE_FROM_ROWS_UP_TO = 200_000

INCIDENT_COLUMNS = ("run_id", "incident_id", "kind", "severity", "start_ns", "end_ns",
                    "subject", "summary", "evidence", "caused_by")

VIEWS: dict[str, ViewSpec] = {v.name: v for v in (
    ViewSpec("checkpoint_windows", ("checkpoint_id",), ("start_ns", "end_ns")),
    ViewSpec("checkpoint_ops", ("span_id",), ("start_ns", "end_ns")),
    ViewSpec("checkpoint_steps", ("span_id",), ("start_ns", "end_ns"), optional=True),
    ViewSpec("shard_states", ("span_id",), ("start_ns", "end_ns")),
    ViewSpec("rollout_attempts", ("span_id",), ("start_ns", "end_ns")),
    ViewSpec("deadlines", ("deadline_id",), ("start_ns", "end_ns")),
    ViewSpec("parked_intervals", ("span_id",), ("start_ns", "end_ns")),
    ViewSpec("completions", ("rollout_id", "attempt"), ("completed_ns", "ack_ns")),
    # released Gym's own rollouts and every model call (Gym's or any OTel client's): whole
    # views (their per-rollout sums cannot be read incrementally), off the tick
    ViewSpec("gym_rollouts", ("span_id",), (), optional=True, gym_only=True,
             cap=MAX_DETAIL_ROWS, anchor=(SpanName.GYM_ROLLOUT,)),
    ViewSpec("model_calls", ("span_id",), (), optional=True, gym_only=True,
             cap=MAX_DETAIL_ROWS,
             anchor=(SpanName.GYM_MODEL_RESPONSES, SpanName.GYM_MODEL_CHAT,
                     SpanName.GYM_MODEL_MESSAGES)),
    # the engines' side (docs/engines.md): each request an engine served (one row per model
    # call, so capped like model_calls and read off the tick), each engine's scraped state
    # (one row per engine and scrape, capped to the latest) and the engine behind each shard
    ViewSpec("engine_requests", ("span_id",), (), optional=True, cap=MAX_DETAIL_ROWS),
    ViewSpec("engine_state", ("engine", "ts_ns"), (), optional=True, cap=MAX_DETAIL_ROWS,
             latest="ts_ns DESC, engine", at="ts_ns"),
    ViewSpec("shard_engines", ("span_id",), (), optional=True),
    ViewSpec("incidents", ("incident_id",), (), INCIDENT_COLUMNS, optional=True),
    ViewSpec("run_thresholds", ("run_id",), (),
             ("run_id", "start_ns", "end_ns", "rollout_timeout_s", "prepare_timeout_s",
              "lease_grace_s", "stall_timeout_s", "watchdog_interval_s", "max_num_steps",
              "unhealthy_threshold", "backend_timeout_s", "max_infra_attempts_per_prompt"),
             optional=True),
    # router/serving_backends against gen_fleet/serving_shards at each watchdog tick
    ViewSpec("serving_samples", ("ts_ns",), ("ts_ns", "ts_ns"),
             ("run_id", "ts_ns", "router_serving", "fleet_serving"), optional=True),
    # what the run holds, whatever its vocabulary: read whole, like the incidents
    ViewSpec("span_catalog", ("service", "name", "kind"), (), optional=True, rarely=True),
    ViewSpec("services", ("service", "pid"), (), optional=True, rarely=True),
    ViewSpec("gym_metrics", ("service", "name", "attributes"), (), optional=True, rarely=True),
)}
# the frames that say something about the run's model (the rest describe what it holds)
MODEL_FRAMES = ("checkpoint_windows", "checkpoint_ops", "shard_states", "rollout_attempts",
                "deadlines", "parked_intervals", "completions", "gym_rollouts", "model_calls",
                "incidents")
TRACE_SPAN_CAP = 1000  # spans one trace view draws at most (it says when it drew fewer)

ROLLOUT_FILTERS = {
    "in incidents": "rollouts named by an incident's evidence or subject",
    "all": "every rollout (capped, longest first)",
    "failed": "rollouts with a failed or cancelled try",
    "redispatched": "rollouts with more than one try",
    "parked": "rollouts parked by a snapshot",
    "open": "rollouts with a try still running",
}
OUTCOMES = ["open", "committed", "finished", "failed", "cancelled"]
# spans no model view holds that tell an incident's story, read around it on demand: what made
# progress (train steps), what held it (a hung weight sync) and what a replay injected
CONTEXT_SPANS: dict[str, tuple[str, ...]] = {
    "stall": (SpanName.RL_TRAIN_STEP, SpanName.RL_WEIGHT_SYNC),
    "stale_weights_serving": (SpanName.RL_WEIGHT_SYNC,),
    "lease_expired": (SpanName.RL_TRAIN_STEP,),
}
ALWAYS_CONTEXT = (SpanName.FAULT,)
CONTEXT_LANES = {SpanName.RL_TRAIN_STEP: "train steps", SpanName.RL_WEIGHT_SYNC: "weight syncs",
                 SpanName.RL_STALL_WATCHDOG_TICK: "stall watchdog",
                 SpanName.FAULT: "injected faults"}
MAX_CONTEXT_SPANS = 400
# attributes every span carries that say nothing about this one
NOISE_ATTRIBUTES = ("nemo.run.id", "rolloutscope.replay.scenario")
FAILURE_CLASSES = ["any", "infra", "data"]


def _empty(spec: ViewSpec) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in spec.columns})


def _keys(df: pd.DataFrame, key: tuple[str, ...]) -> pd.MultiIndex:
    """A frame's row keys, comparable across reads (each key column as text)."""
    return pd.MultiIndex.from_frame(pd.DataFrame({k: as_text(df[k]) for k in key}))


def _key_hits(old: pd.DataFrame, new: pd.DataFrame, key: tuple[str, ...]) -> np.ndarray:
    """Which rows of ``old`` share their key with a row of ``new`` (as ``_keys`` compares
    them). The keys of every old row are not made: the rows whose first key column matches
    are found by one lookup, and only those compare whole keys. At 10M spans making the keys
    of the 0.4-0.8M rows of four frames took ~2.5 s of a tick."""
    first = key[0]
    if old[first].dtype == TEXT:
        maybe = is_in(old[first], as_text(new[first]).dropna().unique())
        maybe |= old[first].isna().to_numpy() & bool(new[first].isna().any())
    else:
        maybe = as_text(old[first]).isin(set(as_text(new[first]))).to_numpy(dtype=bool)
    if len(key) == 1 or not maybe.any():
        return maybe
    at = np.flatnonzero(maybe)
    hits = np.zeros(len(old), dtype=bool)
    hits[at] = _keys(old.iloc[at], key).isin(_keys(new, key))
    return hits


class DataStore(RolloutRows, param.Parameterized):
    """The run a dashboard shows, its view rows, and what the user selected."""

    # a view with a ``<view>_of`` or ``<view>_since`` macro is read through it (off: the view,
    # filtered on the run, the floor and the tick's times, which then computes its sums over
    # every run; bench_render.py's and bench_dashboard.py's baseline)
    macro_reads = True
    # text columns are read as Arrow strings (``RunStore.query_frame``; off: a Python string
    # per value, DuckDB's ``df()``, bench_render.py's load baseline)
    arrow_text = True
    # served, whole reads and what is derived from them are the server's, shared by its
    # sessions (off: each session reads and derives for itself, bench_sessions.py's baseline)
    share_reads = True

    run_id = param.Selector(default=None, objects=[], doc="the run shown")
    incident = param.String(default=None, allow_None=True, doc="selected incident_id")
    rollout_filter = param.Selector(default="in incidents", objects=list(ROLLOUT_FILTERS))
    failure_class = param.Selector(default="any", objects=FAILURE_CLASSES)
    outcomes = param.ListSelector(default=[], objects=OUTCOMES,
                                  doc="attempt outcomes to list (empty: all)")
    trace_id = param.String(default=None, allow_None=True, doc="the trace the Traces tab shows")
    time_range = param.Range(default=None, allow_None=True,
                             doc="seconds since run start the user is looking at")
    window = param.Tuple(default=None, allow_None=True, length=2,
                         doc="window mode: [lo, hi) in ns the interval frames hold (hi None: "
                             "up to the run's head); None: the whole run")
    live = param.Boolean(default=False, constant=True)
    paused = param.Boolean(default=False, doc="live refresh paused")
    version = param.Integer(default=0, doc="bumped whenever the frames change")
    last_refresh_ms = param.Number(default=0.0)
    last_refresh_by_view: dict[str, float]

    def __init__(self, store: RunStore, *, run_id: str | None = None, live: bool = False,
                 waiting_for: str | None = None, shared: SharedReads | None = None,
                 **params) -> None:
        super().__init__(live=live, **params)
        self.store = store
        # the server's shared reads (``dashboard.shared``): frames and what is derived from
        # them, held once for every session; None (a notebook): this DataStore's own
        self.shared = shared
        self.read_timeout_s = (shared.limits.read_timeout_s if shared is not None
                               else DEFAULT_READ_TIMEOUT_S)
        limits = shared.limits if shared is not None else DashboardLimits.from_env()
        # window mode (``window``): a run of more than ``window_spans`` spans
        self.window_spans = limits.window_spans
        self.window_s = limits.window_minutes * 60.0
        self.window_max_s = WINDOW_MAX_MINUTES * 60.0  # a picked stretch is cut to this
        self.large = False
        self._sized: object = None  # the run ``large`` was decided for
        self._follow_head = True  # the window is the run's last window_s, moving with it
        self._run_span: tuple[int, int] | None = None  # (first, last seen ns) of a large run
        self._reading = threading.local()  # what the thread's read is, for its timeout message
        # where a live collector listens, for the page shown before its first span
        self.waiting_for = waiting_for
        self._present: dict[str, bool] = {}
        self._columns = {name: self._typed_empty(spec) for name, spec in VIEWS.items()}
        self.frames: dict[str, pd.DataFrame] = {name: frame.copy() for name, frame in
                                                self._columns.items()}
        self.problems: list[str] = []
        self._ticks = 0
        self._watermark: int | None = None
        self._grown = False  # the run grew since incidents were last read
        self._whole_for: str | None = None  # the run whose whole views the frames hold
        self._run_mark: object = None
        self._whole: Future | None = None  # a background read of the whole views
        self._first_whole = False  # that read is the run's first: the page says so
        self.frame_versions: dict[str, int] = dict.fromkeys(VIEWS, 0)
        # what each frame is across sessions: the shared read it came from, or a token of its
        # own (a merge of a live tick's rows); what is derived from frames is shared by these
        self.frame_tokens: dict[str, object] = {name: ("empty", name) for name in VIEWS}
        self.config: dict = {}
        self.last_refresh_by_view = {}
        self._contexts: dict[tuple, tuple[pd.DataFrame, pd.DataFrame]] = {}
        # derived selections (lanes, grouped ids), reused until a frame or a filter changes:
        # a first render asks for them from several elements, each a pass over every try
        self._derived: dict[tuple, object] = {}
        self._dialects: tuple[tuple, frozenset[str]] | None = None  # (run, version), dialects
        self._registered: tuple[str, ...] | None = None  # the runs table, as last read live
        self._range_source: object = None
        self.range_is_incident = False  # time_range is an incident's window, not a zoom
        runs = store.run_ids()
        self.param.run_id.objects = runs
        self.run_id = run_id or self.default_run(runs)
        self.refresh(full=True)
        self._default_filter()
        self.param.watch(self._on_run, "run_id")
        self.param.watch(self._on_incident, "incident")
        # before any view's watcher: a range outside the window is read before it is drawn
        self.param.watch(self._on_range_for_window, "time_range")

    def default_run(self, runs: list[str]) -> str | None:
        """The run a session opens on: the newest capture, not a replay of one written into
        the same file (``rolloutscope demo`` and ``replay --out RUN.duckdb`` add those)."""
        if not runs:
            return None
        try:
            children = {r for (r,) in self.store.query(
                "SELECT run_id FROM runs WHERE parent_run_id IS NOT NULL "
                "AND parent_run_id IN (SELECT run_id FROM runs)")}
        except StoreError:
            children = set()
        roots = [r for r in runs if r not in children]
        return (roots or runs)[-1]

    def _typed_empty(self, spec: ViewSpec) -> pd.DataFrame:
        """The view's frame with no rows: its columns and types, from the store itself."""
        if not spec.optional or self._view_present(spec.name):
            # from what the rows are read from (``_read_sql``): the kept incidents' columns
            # are the view's, read without planning every detector (0.1-0.5 s at 10^8 spans)
            relation = getattr(self.store, "relation", None)
            source = relation(spec.name) if relation is not None else spec.name
            try:
                return self._shared_read(f"SELECT * FROM {source} LIMIT 0", [],
                                         what=f"the columns of {spec.name}")[0]  # from VIEWS
            except StoreError as exc:
                if not spec.optional:
                    raise
                log.warning("view %s unreadable: %s", spec.name, exc)
        return _empty(spec)

    def _default_filter(self) -> None:
        """A run with no incident lists every rollout: the default filter would list none."""
        if not len(self.frames["incidents"]) and self.rollout_filter == "in incidents":
            self.rollout_filter = "all"

    def state(self) -> str:
        """``no_runs`` (nothing in the store yet), ``no_rows`` (a run, but no model-view row:
        only spans the views do not read) or ``ok``."""
        if self.run_id is None:
            return "no_runs"
        if not any(len(self.frames[name]) for name in MODEL_FRAMES):
            return "no_rows"
        return "ok"

    def _look_for_runs(self) -> bool:
        """Live, before the first span: pick up the first run once it exists."""
        runs = self.store.run_ids()
        if not runs:
            return False
        self.param.run_id.objects = runs
        self.run_id = self.default_run(runs)  # its watcher reads the run in full
        self._default_filter()
        return True

    # -- reading -----------------------------------------------------------------------------
    def _view_present(self, name: str) -> bool:
        if not self._present.get(name):
            self._present[name] = bool(self.store.query(
                "SELECT count(*) FROM duckdb_views() WHERE view_name = ?", [name])[0][0])
        return self._present[name]

    def _query(self, sql: str, params: list | None = None) -> pd.DataFrame:
        """One read, ended by ``ReadTimeout`` after the read time limit (named by
        ``_reading``: what this thread reads)."""
        return timed_frame(self.store, sql, params, self.read_timeout_s,
                           arrow_text=self.arrow_text,
                           what=getattr(self._reading, "what", "the store"))

    def _query_of(self, sql: str, params: list | None, what: str) -> pd.DataFrame:
        self._reading.what = what
        try:
            return self._query(sql, params)
        finally:
            self._reading.what = "the store"

    def _read_key(self, sql: str, params: list) -> tuple:
        return ("read", id(self.store), self.arrow_text, sql, tuple(params),
                self.shared.data_version(self.store))

    def _shared_read(self, sql: str, params: list, *, what: str) -> tuple[pd.DataFrame, object]:
        """A whole read (no watermark), shared by every session of the server when there is
        one: (frame, its token)."""
        if self.shared is None or not self.share_reads:
            return self._query_of(sql, params, what), new_token()
        key = self._read_key(sql, params)
        return self.shared.cache.get(key, lambda: self._query_of(sql, params, what)), key

    def _read(self, spec: ViewSpec, since: int | None) -> pd.DataFrame | None:
        return self._read_tokened(spec, since)[0]

    def _read_tokened(self, spec: ViewSpec, since: int | None
                      ) -> tuple[pd.DataFrame | None, object]:
        """``_read`` and the frame's token: a whole read (``since`` None) is the server's
        shared read; a live tick's rows since its watermark are this session's own."""
        if spec.optional and not self._view_present(spec.name):
            return None, None
        if spec.gym_only and "gym" not in self.dialects():
            return None, None
        floor = self._cap_floor(spec) if spec.cap is not None else None
        sql, params = self._read_sql(spec, since, floor)
        what = f"view {spec.name} of run {self.run_id}"
        try:
            if since is None:
                return self._shared_read(sql, params, what=what)
            return self._query_of(sql, params, what), new_token()
        except StoreError as exc:
            if not spec.optional:
                raise
            self.problems.append(f"view {spec.name} unreadable: {exc}")
            log.warning("view %s unreadable: %s", spec.name, exc)
            return None, None

    def _read_sql(self, spec: ViewSpec, since: int | None,
                  floor: int | None) -> tuple[str, list]:
        """The query of ``_read`` (names from VIEWS, not from input)."""
        window = self.window if spec.times else None
        maintained = bool(getattr(self.store, "maintained", False))
        if (spec.name in store_views.incremental() and self.macro_reads
                and not (window is not None and since is None and maintained)):
            # through its macro: the rows an event since reached (NULL: every row), grouped
            # from their own events only. A window's full read on a maintained store reads the
            # kept rows instead (below): the macro with no since groups every row of the run
            source, where, params = f"{spec.name}_since(?, ?)", [], [self.run_id, since]
            since = None
        elif spec.name in store_views.readers() and self.macro_reads:
            # through its macro: the run and the floor reach the spans its aggregates read
            source, where, params = f"{spec.name}_of(?, ?)", [], [self.run_id, floor]
        else:
            # the maintained rows where the store keeps them (RunStore.relation): equal to the
            # view, read without computing it over every span
            relation = getattr(self.store, "relation", None)
            source = relation(spec.name) if relation is not None else spec.name
            where, params = ["run_id = ?"], [self.run_id]
            if floor is not None:
                where.append(f"{spec.at} >= ?")
                params.append(floor)
        if since is not None and spec.times:
            start, end = spec.times
            where.append(f"({end} IS NULL OR {end} >= ? OR {start} >= ?)")
            params += [since, since]
        if window is not None:
            # the rows overlapping [lo, hi): those ended by their end, the open ones apart.
            # Maintained rows are appended as their spans end, so DuckDB's zonemaps skip the
            # row groups that ended before lo; an OR of the two would be read whole
            start, end = spec.times
            lo, hi = window
            if hi is not None:
                where.append(f"{start} < ?")
                params.append(int(hi))
            both = " AND ".join(where) + " AND " if where else ""
            sql = (f"SELECT * FROM {source} WHERE {both}{end} >= ? UNION ALL "
                   f"SELECT * FROM {source} WHERE {both}{end} IS NULL")
            params = [*params, int(lo), *params]
        else:
            sql = f"SELECT * FROM {source}" + (f" WHERE {' AND '.join(where)}" if where else "")
        if spec.cap is not None:
            sql += f" ORDER BY {spec.latest} LIMIT {int(spec.cap)}"
        return sql, params

    def _cap_bounds(self) -> tuple[int | None, int | None]:
        """The stretch a capped view's rows start in, (from, None: up to the run's head);
        (None, None): the run's latest rows, for a run read whole. In window mode, from the
        window's lo less ``CAP_MARGIN_NS`` when the window reaches the head (the window a
        session opens on, and live); for a window that ends before the head, the same as the
        window a session opens on (the run's last ``window_s``): the Gym views' macros
        (``<view>_of(run, floor_ns)``) compute every row from their floor to the run's head,
        so a stretch in the past would cost what the run holds after it (picking the oldest
        incident of a 10M-span run: 22-31 s), and this read is the opening's, shared."""
        if self.window is None:
            return None, None
        lo, hi = self.window
        if hi is not None:
            first, last = self._run_span or self._read_run_span()
            lo = max(last - int(self.window_s * 1e9), first)
        return int(lo) - CAP_MARGIN_NS, None

    def _cap_floor(self, spec: ViewSpec) -> int | None:
        """A time (``spec.at``) the rows a capped view's read holds all start at or after:
        the newest ``spec.cap`` rows' floor from its anchor spans (``_anchor_floor``; None:
        no anchor, or fewer anchor spans than the cap), and in window mode no earlier than
        the window's lo less ``CAP_MARGIN_NS``. None: the whole view."""
        bound, hi = self._cap_bounds()
        floor = self._anchor_floor(spec, hi) if spec.anchor else None
        if bound is not None:
            floor = bound if floor is None else max(floor, bound)
        return floor

    def _anchor_floor(self, spec: ViewSpec, hi: int | None) -> int | None:
        """A start time the newest ``spec.cap`` rows of a capped view (those starting before
        ``hi``, None: any) all start at or after, or None (fewer anchor spans than the cap,
        none at all included: read the whole view).

        The anchor spans are some of the view's rows (one row each, same start_ns): when
        ``cap`` of them start at or after T, so do the view's newest ``cap`` rows. The view's
        macro computes them from T on (``_read``): at 10M spans the latest 20,000 model calls
        read in 0.8 s instead of 4.8 s over the whole run, the latest 20,000 Gym rollouts in
        1.2 s instead of 15.7 s.

        A store that keeps its span counts (``store.maintained``: ``d_span_buckets``, spans
        by run, name and minute, and ``rs_tail.spans``, those not derived yet) answers from
        them: the newest minute from which at least ``cap`` anchor spans start (a minute that
        reaches past ``hi`` is not counted, open spans are not: both only lower the floor).
        That reads a few rows per minute of the run, never its spans; at 10^8 spans finding
        the cap-th newest span by a scan took 1.4-4.4 s. Other stores find that span."""
        names = list(spec.anchor)
        k = len(names)
        marks = ", ".join(f"${i + 2}" for i in range(k))  # $1 the run, ${k + 2} hi
        what = f"the newest {spec.name} of run {self.run_id}"
        if getattr(self.store, "maintained", False):
            w = SPAN_BUCKET_NS
            sql = (
                "WITH per AS (SELECT bucket_ns, sum(n) AS n FROM ("
                "  SELECT bucket_ns, spans AS n FROM d_span_buckets WHERE run_id = $1"
                f"    AND name IN ({marks})"
                f"    AND (${k + 2}::BIGINT IS NULL OR bucket_ns + {w} <= ${k + 2})"
                "  UNION ALL"
                f"  SELECT start_ns // {w} * {w}, count(*) FROM rs_tail.spans WHERE run_id = $1"
                f"    AND name IN ({marks}) AND start_ns IS NOT NULL"
                f"    AND (${k + 2}::BIGINT IS NULL OR start_ns < ${k + 2}) GROUP BY ALL"
                ") GROUP BY bucket_ns) "
                "SELECT bucket_ns FROM (SELECT bucket_ns, sum(n) OVER (ORDER BY bucket_ns DESC "
                "ROWS UNBOUNDED PRECEDING) AS reach FROM per) "
                f"WHERE reach >= {int(spec.cap)} ORDER BY bucket_ns DESC LIMIT 1")
            params = [self.run_id, *names, hi]
        else:
            bound, _ = self._cap_bounds()
            sql = (f"SELECT start_ns FROM all_spans WHERE run_id = ? AND name IN "
                   f"({', '.join('?' * k)}) AND start_ns IS NOT NULL"
                   + (" AND start_ns >= ?" if bound is not None else "")
                   + (" AND start_ns < ?" if hi is not None else "")
                   + f" ORDER BY start_ns DESC LIMIT 1 OFFSET {int(spec.cap) - 1}")
            params = [self.run_id, *names,
                      *([bound] if bound is not None else []), *([hi] if hi is not None else [])]
        try:
            row = self._shared_read(sql, params, what=what)[0]
        except StoreError:
            return None
        return int(row.iloc[0, 0]) if len(row) and pd.notna(row.iloc[0, 0]) else None

    def capped_text(self, name: str) -> str:
        """What a capped frame (the Gym tables, the engine views) holds, in words."""
        spec, frame = VIEWS[name], self.frames[name]
        full = len(frame) >= int(spec.cap or 0)
        bound, _ = self._cap_bounds()
        if bound is None:
            return (f"{name}: the latest {spec.cap:,} rows of the run; the store holds more"
                    if full else "")
        t0 = self.origin_ns()
        which = f"the latest {spec.cap:,}" if full else "the"
        past = self.window is not None and self.window[1] is not None
        return (f"{name}: {which} rows that start from {(bound - t0) / 1e9:,.0f} s "
                f"({CAP_MARGIN_NS // 60 // 10**9} minutes before "
                + ("the run's last stretch) to its head, not this stretch's: read for a "
                   "stretch in the past, the view costs what the run holds after it"
                   if past else "the window) to the run's head"))

    def refresh(self, *, full: bool = False) -> bool:
        """Read what changed since the last refresh; True if any frame changed."""
        if self.run_id is None:
            return self.live and self._look_for_runs()
        t = time.perf_counter()
        self._ticks += 1
        full = full or self._watermark is None or self._ticks % FULL_RELOAD_EVERY == 0
        since = None if full else self._watermark - LATE_MARGIN_NS
        if full:
            self._size_up()
        self.problems = []
        self.last_refresh_by_view = {}
        whole_due = full or (self._ticks % INCIDENTS_EVERY == 0
                             and (self._grown or self._run_moved()))
        if whole_due:
            self._grown = False
        if full and not self._first_whole:
            self._whole = None  # a full read is fresher than anything still in flight
        changed = self._take_whole()
        # a full reload re-reads the whole views inline only when they are due (their first
        # read for this run, or the pace allows): else they stay, and are read in the
        # background once it does. A large live run's first read is in the background too:
        # its detectors take seconds (12 s at 10^8 spans), and the page opens without them
        first_whole = (full and self.live and self.large and self._whole_for != self.run_id
                       and (self._whole is None or not self._first_whole))
        whole_inline = full and not first_whole and not (self._first_whole and self._whole) \
            and (self._whole_for != self.run_id or _WHOLE_PACE.due())
        if self._first_whole and self._whole is not None:
            self.problems.append(READING_INCIDENTS)
        if full and not whole_inline:
            self._grown = True
        whole_s = 0.0
        for name, spec in VIEWS.items():
            if not (spec.times or full):
                continue
            if not spec.times and not spec.rarely and not whole_inline:
                continue
            started = time.perf_counter()
            new, token = self._read_tokened(spec, None if not spec.times else since)
            self.last_refresh_by_view[name] = (time.perf_counter() - started) * 1e3
            if not spec.times and not spec.rarely:
                whole_s += time.perf_counter() - started
            if new is None:
                continue
            old = self.frames[name]
            if full or not spec.times:
                if _same(old, new):
                    continue
                merged = new
            elif len(new):
                hit = _key_hits(old, new, spec.key) if len(old) else np.zeros(0, dtype=bool)
                # re-read rows (still open, or inside the late margin) that did not change
                # must not count as a change, or every idle tick would redraw every view
                if hit.sum() == len(new) and _same(
                        rows_where(old, hit).sort_values(list(spec.key)),
                        new.sort_values(list(spec.key))):
                    continue
                # the old rows kept chunk by chunk (``rows_where``): pandas joins the chunks of
                # every text column first
                kept = rows_where(old, ~hit) if len(old) else old
                merged = pd.concat([kept, new], ignore_index=True) if len(kept) else new
            else:
                continue
            if merged is not new:
                token = new_token()  # this session's own rows
            self.frames[name] = _indexed(merged)
            self.frame_tokens[name] = token
            self.frame_versions[name] += 1
            changed = True
            if spec.times:
                self._grown = True
        if whole_inline:
            self._whole_for = self.run_id
            _WHOLE_PACE.took(whole_s)
        if full:
            self.config = self.store.run_config(self.run_id)
            self._run_moved()  # what a full read covered: the next look compares against it
        if self.live:
            # runs that started since (one small read a tick): the run picker offers them and
            # the Replay tab picks up a replay written beside its capture (the demo's fix
            # replays) at once, not at the next full reload
            registered = tuple(r for (r,) in self.store.query(
                "SELECT run_id FROM runs ORDER BY run_id"))
            if full or registered != self._registered:
                self._registered = registered
                runs = self.store.run_ids()
                if runs != list(self.param.run_id.objects):
                    self.param.run_id.objects = runs
                    full = True  # every view's revision moves
        self._watermark = self.last_seen_ns()
        self.last_refresh_ms = (time.perf_counter() - t) * 1e3
        if changed or full:
            self.version += 1  # the views on screen redraw here
        if whole_due and not full:
            # once this tick's reads and redraws are done: the whole read takes every core
            # DuckDB has for ~1 s at 10M spans, and started first it slowed them by a third
            self._read_whole_in_background()
        elif first_whole:
            self._read_whole_in_background(first=True)
            self.problems.append(READING_INCIDENTS)
        return changed

    # -- window mode: a large run's interval views read for a stretch of time ------------------
    def _size_up(self) -> None:
        """On a full read: whether the run is large (decided once per run, from the store's
        kept span counts) and, if so, its time span and the window that follows its head."""
        if self._sized != self.run_id:
            self._sized = self.run_id
            self.large = self._span_count() > self.window_spans
            self._follow_head = True
            self._run_span = None
            self.window = None
        if not self.large:
            return
        self._run_span = self._read_run_span()
        if self._follow_head:
            first, last = self._run_span
            self.window = (max(last - int(self.window_s * 1e9), first), None)

    def _span_count(self) -> int:
        """The run's spans: the store's kept counts by name and minute (``d_span_buckets``,
        a few rows per minute of the run) and those of the spans not derived yet
        (``rs_tail.spans``), or a count of its spans where it keeps none."""
        if getattr(self.store, "maintained", False):
            sql = ("SELECT (SELECT coalesce(sum(spans), 0) FROM d_span_buckets WHERE run_id = $1)"
                   " + (SELECT count(*) FROM rs_tail.spans WHERE run_id = $1)")
        else:
            sql = "SELECT count(*) FROM all_spans WHERE run_id = $1"
        try:
            return int(self.store.query(sql, [self.run_id])[0][0])
        except StoreError as exc:
            log.warning("the span count of run %s is unreadable (%s): read whole",
                        self.run_id, exc)
            return 0

    def _read_run_span(self) -> tuple[int, int]:
        """The run's first and last instant (its ``runs`` row, else its spans)."""
        rows = self.store.query("SELECT first_seen_ns, last_seen_ns FROM runs WHERE run_id = ?",
                                [self.run_id])
        if not rows or rows[0][0] is None or rows[0][1] is None:
            rows = self.store.query("SELECT min(start_ns), max(coalesce(end_ns, start_ns)) "
                                    "FROM all_spans WHERE run_id = ?", [self.run_id])
        first, last = rows[0] if rows else (None, None)
        first = int(first) if first is not None else 0
        return first, int(last) if last is not None else first

    @property
    def windowed(self) -> bool:
        """Whether the interval frames hold a window of the run, not all of it."""
        return self.window is not None

    def window_seconds(self) -> tuple[float, float] | None:
        """The window in seconds since the run started (None: not windowed)."""
        if self.window is None:
            return None
        t0, (lo, hi) = self.origin_ns(), self.window
        hi = self.last_seen_ns() if hi is None else min(hi, self.last_seen_ns())
        return ((lo - t0) / 1e9, max(hi - t0, lo - t0) / 1e9)

    def shown_stretch(self) -> tuple[float, float]:
        """What the time plots open on: the window, else the whole run."""
        return self.window_seconds() or self.whole_run()

    def move_window(self, lo_ns: int, hi_ns: int, *, keep_start: bool = False) -> None:
        """Window mode: read the interval views for [lo_ns, hi_ns) instead, widened to
        ``window_s`` at least (room to pan and zoom out a little), cut to its last
        ``window_max_s`` (its first, ``keep_start``: an incident still open shows how it
        began), within the run; up to the run's head when it reaches it."""
        if not self.large:
            return
        first, last = self._run_span or self._read_run_span()
        lo, hi = max(int(lo_ns), first), min(int(hi_ns), last + 1)
        need, most = int(self.window_s * 1e9), int(self.window_max_s * 1e9)
        if hi - lo < need:  # centred on the pick, shifted to lie within the run
            lo = max(min((lo + hi) // 2 - need // 2, last + 1 - need), first)
            hi = min(lo + need, last + 1)
        if keep_start:
            hi = min(hi, lo + most)
        else:
            lo = max(lo, hi - most)
        window = (lo, None if hi >= last else hi)
        self._follow_head = False
        if window == self.window:
            return
        self.window = window
        self._watermark = None
        try:
            self.refresh(full=True)
        except ReadTimeout as exc:
            self._timed_out(exc)

    def _covers(self, lo_ns: int, hi_ns: int) -> bool:
        if self.window is None:
            return True
        first, last = self._run_span or (lo_ns, hi_ns)
        lo, hi = max(lo_ns, first), min(hi_ns, last)
        wlo, whi = self.window
        return lo >= wlo and (whi is None or hi <= whi)

    def _on_range_for_window(self, event) -> None:
        """A time range outside the window (an incident picked, a stretch of the whole-run
        picture, a link, a zoom out) moves the window onto it before any view draws it."""
        if not self.large or event.new is None:
            return
        t0 = self.origin_ns()
        lo, hi = (t0 + int(v * 1e9) for v in event.new)
        if not self._covers(lo, hi):
            self.move_window(lo, hi, keep_start=self.range_is_incident)

    def _read_whole_in_background(self, *, first: bool = False) -> None:
        if self._whole is not None and not self._whole.done():
            return  # the previous read is still running: its result is as fresh
        if not first and not _WHOLE_PACE.due():
            self._grown = True  # still due: a later tick asks again
            return
        self._first_whole = first
        run_id = self.run_id
        specs = [spec for spec in VIEWS.values() if not spec.times and not spec.rarely]

        def read() -> tuple[str | None, dict[str, tuple[pd.DataFrame | None, float, object]]]:
            out, began = {}, time.perf_counter()
            try:
                for spec in specs:
                    started = time.perf_counter()
                    new, token = self._read_tokened(spec, None)
                    out[spec.name] = (new, (time.perf_counter() - started) * 1e3, token)
            finally:
                _WHOLE_PACE.took(time.perf_counter() - began)
            return run_id, out

        self._whole = _WHOLE_READS.submit(read)

    def _take_whole(self) -> bool:
        """Apply a finished background read of the whole views; True if a frame changed."""
        future = self._whole
        if future is None or not future.done():
            return False
        self._whole = None
        try:
            run_id, frames = future.result()
        except Exception as exc:  # noqa: BLE001 - shown as a problem, the tick goes on
            self.problems.append(f"incident views unreadable: {exc}")
            return False
        self._first_whole = False
        if run_id != self.run_id:
            return False  # read for a run no longer shown
        self._whole_for = run_id
        changed = False
        for name, (new, ms, token) in frames.items():
            self.last_refresh_by_view[name] = ms
            if new is not None and not _same(self.frames[name], new):
                self.frames[name] = _indexed(new)
                self.frame_tokens[name] = token
                self.frame_versions[name] += 1
                changed = True
        return changed

    def _run_moved(self) -> bool:
        """Whether the run's recorded time range moved since the last look (one keyed row)."""
        try:
            mark = self.store.query("SELECT first_seen_ns, last_seen_ns FROM runs "
                                    "WHERE run_id = ?", [self.run_id])
        except StoreError:
            return True
        moved, self._run_mark = mark != self._run_mark, mark
        return moved

    def tick(self) -> None:
        """The live periodic callback: refresh unless paused. A read that ran out of time
        is a problem shown on the page and logged; the next tick tries again."""
        if not self.paused:
            try:
                self.refresh()
            except ReadTimeout as exc:
                self._timed_out(exc)

    def _timed_out(self, exc: ReadTimeout) -> None:
        log.warning("dashboard read stopped: %s", exc)
        self.problems = [*self.problems, str(exc)]
        self.version += 1  # the page shows it

    def _on_run(self, event) -> None:
        self.incident = None
        self.trace_id = None
        self.time_range = None
        self._watermark = None
        self._ticks = 0
        self._run_mark = None
        self._whole_for = None
        self._contexts = {}
        try:
            self.refresh(full=True)
        except ReadTimeout as exc:
            self._timed_out(exc)

    # -- the time range every time plot shows -------------------------------------------------
    def show_range(self, rng: tuple[float, float] | None, *, source: object = None) -> None:
        """Show ``rng`` (seconds since the run started; None: each plot's default) on every
        time plot. ``source`` is the view whose plot the user zoomed: it already shows it."""
        if rng is not None:
            rng = (round(float(rng[0]), 3), round(float(rng[1]), 3))
            if not rng[1] > rng[0]:  # also refuses NaN
                return
        self._range_source = source
        if source is not None or rng is None:
            self.range_is_incident = False  # a zoom, or the default
        try:
            self.time_range = rng
        finally:
            self._range_source = None

    def range_from(self, view: object) -> bool:
        """Whether the time range now changing came from ``view``'s own plot."""
        return self._range_source is view and view is not None

    def whole_run(self) -> tuple[float, float]:
        return (0.0, max((self.last_seen_ns() - self.origin_ns()) / 1e9, 1.0))

    def _on_incident(self, event) -> None:
        """Picking an incident brings every time plot onto it; clearing the pick, back to the
        whole run."""
        inc = self.selected_incident()
        rng = self.incident_window(inc) if inc is not None else None
        rng = tuple(round(v, 3) for v in rng) if rng is not None else None
        self.range_is_incident = rng is not None
        if rng == self.time_range:  # the plots still redraw: the highlight moved
            self.param.trigger("time_range")
        else:
            self.show_range(rng)
            self.range_is_incident = rng is not None

    def incident_window(self, incident: Mapping) -> tuple[float, float]:
        """The seconds that show an incident: its own interval and its evidence bars (within a
        few times its length of it: a shard's dead stay runs to the end of the run), padded."""
        key = incident.get("incident_id")
        if key is None:
            return self._incident_window(incident)
        # every frame: an open incident ends at last_seen_ns, which any of them can move
        return self.derived(("incident_window", str(key)), tuple(VIEWS),
                            lambda: self._incident_window(incident))

    def _incident_window(self, incident: Mapping) -> tuple[float, float]:
        t0, now = self.origin_ns(), self.last_seen_ns()
        start = int(incident["start_ns"])
        end = int(incident["end_ns"]) if pd.notna(incident.get("end_ns")) else now
        reach = max(5 * (end - start), 120 * 10**9)
        lo, hi = start, end
        ev = self.evidence(incident)
        if ev:
            for name in ("rollout_attempts", "parked_intervals", "checkpoint_ops",
                         "shard_states", "checkpoint_windows"):
                df = self.evidence_rows(name)
                if not len(df):
                    continue
                rows = df[is_in(df.span_id, ev)]
                if len(rows):
                    lo = min(lo, max(int(rows.start_ns.min()), start - reach))
                    hi = max(hi, min(int(rows.end_ns.fillna(now).max()), end + reach))
        return pad_range((lo - t0) / 1e9, (hi - t0) / 1e9)

    # -- what an incident's evidence and context are, beyond the model views ------------------
    def incident_context(self, incident: Mapping, window: tuple[float, float]
                         ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Spans and events that tell an incident's story and that no model view holds: its
        evidence spans found only in all_spans (a watchdog tick, an HTTP request), their
        events (the watchdog's stall line), and around it the spans ``CONTEXT_SPANS`` names for
        its kind (train steps, weight syncs) and any injected fault. Read on demand, once per
        incident and window; SPAN_COLUMNS and EVENT_COLUMNS frames."""
        key = (self.run_id, str(incident["incident_id"]), window,
               self.frame_versions["incidents"])
        if key in self._contexts:
            return self._contexts[key]
        t0 = self.origin_ns()
        lo, hi = t0 + int(window[0] * 1e9), t0 + int(window[1] * 1e9)
        known = set()
        ev = self.evidence(incident)
        for name in self.frames if ev else ():
            df = self.evidence_rows(name)
            if len(df):
                known |= set(df.span_id[is_in(df.span_id, ev)].astype(str))
        outside = sorted(ev - known)
        names = list(dict.fromkeys(CONTEXT_SPANS.get(str(incident["kind"]), ())
                                   + ALWAYS_CONTEXT))
        cols = "span_id, name, service, start_ns, end_ns, status_code, attributes"
        parts = []
        if outside:
            parts.append(self.store.query_df(
                f"SELECT {cols}, true AS evidence FROM all_spans WHERE run_id = ? "
                "AND span_id IN (SELECT unnest(?::VARCHAR[]))", [self.run_id, outside]))
        parts.append(self.store.query_df(
            f"SELECT {cols}, false AS evidence FROM all_spans WHERE run_id = ? "
            "AND name IN (SELECT unnest(?::VARCHAR[])) AND start_ns <= ? "
            "AND coalesce(end_ns, ?) >= ? ORDER BY start_ns LIMIT ?",
            [self.run_id, names, hi, hi, lo, MAX_CONTEXT_SPANS]))
        found = pd.concat([p for p in parts if len(p)] or [parts[-1]], ignore_index=True)
        found = found.drop_duplicates("span_id")
        events = pd.DataFrame(columns=["span_id", "name", "ts_ns", "attributes"])
        with_events = list(found.span_id[found.evidence | (found.name == SpanName.FAULT)])
        if with_events:
            events = self.store.query_df(
                "SELECT span_id, name, ts_ns, attributes FROM all_events WHERE run_id = ? "
                "AND span_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY ts_ns",
                [self.run_id, with_events])
        lane = found.name.map(CONTEXT_LANES).fillna(found.name)
        spans = pd.DataFrame({
            "lane": lane.astype(str), "name": found.name.astype(str),
            "start_ns": found.start_ns, "end_ns": found.end_ns,
            "span_id": found.span_id.astype(str),
            "detail": [attribute_text(a) for a in found.attributes],
            "status": found.status_code.fillna("").astype(str)}, columns=SPAN_COLUMNS)
        span_lane = dict(zip(spans.span_id, spans.lane))
        ev_rows = pd.DataFrame({
            "lane": events.span_id.map(span_lane).astype(str) if len(events) else [],
            "name": events.name.astype(str) if len(events) else [],
            "ts_ns": events.ts_ns if len(events) else [],
            "detail": [attribute_text(a) for a in events.attributes] if len(events) else []},
            columns=EVENT_COLUMNS)
        out = (spans, ev_rows)
        self._contexts = {key: out}  # one incident at a time is on screen
        return out

    def waiting_at(self, incident: Mapping):
        """What the run waited on while ``incident`` lasted (``rolloutscope why``,
        rolloutscope.store.waiting): just before it ended, or, while it lasts, at the last
        moment the store holds. Read on demand, once per incident and version of it."""
        from rolloutscope.store.waiting import waiting_on

        end = incident.get("end_ns")
        key = ("waiting", self.run_id, str(incident["incident_id"]),
               self.frame_versions["incidents"])
        if key not in self._contexts:
            at = None if end is None or pd.isna(end) else int(end) - 1
            self._contexts[key] = waiting_on(self.store, self.run_id, at_ns=at)
        return self._contexts[key]

    # -- what the views ask ------------------------------------------------------------------
    def view(self, name: str) -> pd.DataFrame:
        return self.frames[name]

    def origin_ns(self) -> int:
        """Time zero of the run (``run_thresholds.origin_ns``, as every reader counts it)."""
        th = self.frames["run_thresholds"]
        if len(th) and pd.notna(th.origin_ns.iloc[0]):
            return int(th.origin_ns.iloc[0])
        if self._run_span is not None:  # window mode: the frames start at the window
            return self._run_span[0]
        starts = [int(df[c].min()) for name, df in self.frames.items()
                  for c in VIEWS[name].times[:1] if len(df) and df[c].notna().any()]
        return min(starts) if starts else 0

    def last_seen_ns(self) -> int:
        """'Now' for drawing open intervals: the latest time any view row mentions (remembered
        until a frame changes: a first render asks a dozen times, each a pass over every
        row's times)."""
        seen = self.derived(("last_seen",), tuple(VIEWS), self._last_seen_ns)
        if self._run_span is not None:  # window mode: the frames may end before the run
            return max(seen, self._run_span[1])
        return seen

    def _last_seen_ns(self) -> int:
        ends = []
        for name, df in self.frames.items():
            for c in dict.fromkeys(VIEWS[name].times):
                if len(df) and df[c].notna().any():
                    ends.append(int(df[c].max()))
        th = self.frames["run_thresholds"]
        if len(th) and pd.notna(th.end_ns.iloc[0]):
            ends.append(int(th.end_ns.iloc[0]))
        return max(ends) if ends else self.origin_ns()

    def incidents(self) -> pd.DataFrame:
        """Incidents newest first (remembered per version: a first render asks a dozen
        times)."""
        return self.derived(("incidents_newest_first",), ("incidents",),
                            lambda: self.frames["incidents"].sort_values(
                                ["start_ns", "incident_id"], ascending=[False, True]))

    def selected_incident(self) -> Mapping | None:
        if not self.incident:
            return None
        inc = self.frames["incidents"]
        rows = inc[inc.incident_id == self.incident]
        return rows.iloc[0].to_dict() if len(rows) else None

    def evidence(self, incident: Mapping | None = None) -> frozenset[str]:
        incident = incident if incident is not None else self.selected_incident()
        if incident is None:
            return frozenset()
        return frozenset(str(e) for e in listish(incident.get("evidence")))

    def derived(self, what: tuple, frames: tuple[str, ...], compute):
        """``compute()``, remembered for ``what`` until one of ``frames`` (or the run)
        changes. Served, it is remembered by the frames' tokens in the server's cache, so
        sessions over the same frames derive it once (``what`` names every input besides
        the frames, as it must for this memo)."""
        if self.shared is not None and self.share_reads:
            tokens = tuple(self.frame_tokens[f] for f in frames)
            # what a live tick merged is this session's alone: derived from it, kept here
            if all(shareable(t) for t in tokens):
                return self.shared.cache.get(("derived", id(self.store), what, self.run_id,
                                              *tokens), compute)
        key = (what, self.run_id, *(self.frame_versions[f] for f in frames))
        value = self._derived.get(key)
        if value is None:
            if len(self._derived) > 256:  # stale versions pile up on a live run
                self._derived.clear()
            value = self._derived[key] = compute()
        return value

    def run_buckets(self) -> tuple[pd.DataFrame, int] | None:
        """The whole run by time bucket and the bucket's width in seconds
        (``run_picture.read``: the store's kept per-second sums, a few rows per second of the
        run), shared by a server's sessions for the data version. None where the store keeps
        no sums and the run is too large to sum its rows on a page load."""
        if self.run_id is None:
            return None
        maintained = bool(getattr(self.store, "maintained", False))
        if not maintained and (self.large or
                               len(self.frames["rollout_attempts"]) > PICTURE_FROM_ROWS_UP_TO):
            return None
        length_s = max(self.last_seen_ns() - self.origin_ns(), 0) / 1e9
        width = run_picture.bucket_s(length_s)

        def compute():
            return run_picture.read(self.store, self.run_id, length_s)

        if self.shared is not None and self.share_reads:
            return self.shared.cache.get(("buckets", id(self.store), self.run_id, width,
                                          self.shared.data_version(self.store)), compute)
        return compute()

    def rollout_gauges(self) -> tuple[pd.DataFrame, bool]:
        """``rollout_gauges_frame`` of the run's tries, up to now (the Timeline and the
        Incident tab draw the same one)."""
        t0, now = self.origin_ns(), self.last_seen_ns()
        return self.derived(("gauges", t0, now), ("rollout_attempts",),
                            lambda: rollout_gauges_frame(self.frames["rollout_attempts"],
                                                         t0_ns=t0, now_ns=now))

    def attempts_table(self) -> pd.DataFrame:
        att = self.frames["rollout_attempts"]
        if self.outcomes:
            att = att[att.outcome.isin(self.outcomes)]
        if self.failure_class != "any":
            att = att[att.failure_class == self.failure_class]
        return att

    def indicators(self) -> dict[str, int]:
        """Live counts, each a row count of one view."""
        att, parked = self.frames["rollout_attempts"], self.frames["parked_intervals"]
        win, shards = self.frames["checkpoint_windows"], self.frames["shard_states"]
        current = shards[shards.end_ns.isna()] if len(shards) else shards
        calls = self.frames["model_calls"]
        return {
            "committed": int((att.outcome == "committed").sum()),
            "finished": int((att.outcome == "finished").sum()),
            "gym_rollouts": len(self.frames["gym_rollouts"]),
            "model_calls": len(calls),
            "model_call_errors": int((calls.outcome == "error").sum()) if len(calls) else 0,
            "in_flight": int((att.outcome == "open").sum()),
            "parked": int(parked.end_ns.isna().sum()) if len(parked) else 0,
            # RL tries after a prompt group's first; a Gym rollout's later attempts (rid-aN)
            # are restores or its caller's choice, not re-dispatches
            "redispatches": int(((att.attempt.fillna(0) > 0) & (att.dialect == "rl")).sum())
            if len(att) else 0,
            "failed_tries": int(att.outcome.isin(["failed", "cancelled"]).sum()),
            "snapshots_ok": int((win.outcome == "committed").sum()),
            "snapshots_failed": int(win.outcome.isin(["failed", "aborted"]).sum()),
            "snapshots_open": int((win.outcome == "open").sum()),
            "serving": int(current.serving.fillna(False).astype(bool).sum()) if len(current)
            else 0,
            "shards": int(shards.shard_idx.nunique()) if len(shards) else 0,
            "incidents": len(self.frames["incidents"]),
        }

    def unnamed_spans(self) -> int:
        """Spans of a file that carry no run id (written before the store filed them under its
        default run): no view shows them."""
        return int(self.store.query("SELECT count(*) FROM all_spans WHERE run_id IS NULL")[0][0])

    def dialects(self) -> set[str]:
        """Whose rollout rows the run has: 'rl', 'gym', both or neither.

        Remembered with the tries' version, in one attribute of its own: the background read
        of the whole views asks too, on its own thread. The version is read before the frame,
        and a frame is replaced before its version moves, so a value is never kept under a
        newer version than the frame it came from."""
        mark = (self.run_id, self.frame_versions["rollout_attempts"])
        memo = self._dialects
        if memo is not None and memo[0] == mark:
            return set(memo[1])
        att = self.frames["rollout_attempts"]
        found = frozenset(str(d) for d in att.dialect.dropna().unique()) \
            if "dialect" in att else frozenset()
        self._dialects = (mark, found)
        return set(found)

    # -- traces: read on demand, for the Traces tab only ----------------------------------
    def trace_choices(self, limit: int = 500) -> pd.DataFrame:
        """Traces to pick from, newest first: every rollout's (from the rollout views), then
        the run's other trace roots, at most ``limit`` of those."""
        if self.run_id is None:
            return pd.DataFrame(columns=["trace_id", "label", "start_ns"])
        att = self.frames["rollout_attempts"]
        rows = []
        if len(att) and "trace_id" in att:
            for r in att.dropna(subset=["trace_id"]).itertuples(index=False):
                who = r.capture_key if r.dialect == "gym" and isinstance(r.capture_key, str) \
                    else f"{r.rollout_id} try {_fmt_int(r.attempt)}"
                rows.append((r.trace_id, f"rollout {who} ({r.outcome}, "
                             f"{_fmt_s(r.duration_s)})", r.start_ns))
        seen = {t for t, _, _ in rows}
        roots = self.store.query_df(
            "SELECT trace_id, name, service, start_ns, duration_s, status_code, rollout_id "
            "FROM trace_roots WHERE run_id = ? ORDER BY start_ns DESC LIMIT ?",
            [self.run_id, limit])
        for r in roots.itertuples(index=False):
            if r.trace_id in seen:
                continue
            seen.add(r.trace_id)
            err = ", error" if r.status_code == "ERROR" else ""
            rows.append((r.trace_id, f"{r.name} on {r.service} ({_fmt_s(r.duration_s)}{err})",
                         r.start_ns))
        out = pd.DataFrame(rows, columns=["trace_id", "label", "start_ns"])
        return out.sort_values("start_ns", ascending=False, ignore_index=True)

    def trace_spans(self, trace_id: str, cap: int = TRACE_SPAN_CAP) -> tuple[pd.DataFrame, int]:
        """The spans of one trace of this run (at most ``cap``, earliest first), and how many
        it has."""
        total = self.store.query("SELECT count(*) FROM all_spans WHERE run_id = ? AND "
                                 "trace_id = ?", [self.run_id, trace_id])[0][0]
        spans = self.store.query_df(
            "SELECT span_id, parent_span_id, name, kind, service, start_ns, end_ns, "
            "status_code, status_message, attributes, is_open FROM all_spans "
            "WHERE run_id = ? AND trace_id = ? ORDER BY start_ns, span_id LIMIT ?",
            [self.run_id, trace_id, cap])
        return spans, int(total)

    def thresholds(self) -> dict[str, object]:
        th = self.frames["run_thresholds"]
        if len(th):
            row = th.iloc[0].drop(labels=["run_id", "start_ns", "end_ns", "origin_ns"],
                                  errors="ignore")
            return {k: v for k, v in row.items() if pd.notna(v)}
        return {}


def attribute_text(attributes: object, limit: int = 6) -> str:
    """A span's or event's attributes as ``key=value`` pairs, the common ones left out."""
    if attributes is None or (isinstance(attributes, float) and pd.isna(attributes)):
        return ""
    try:
        attrs = json.loads(attributes) if isinstance(attributes, str) else dict(attributes)
    except (ValueError, TypeError):
        return str(attributes)[:200]
    pairs = [f"{k.rsplit('.', 1)[-1] if k.startswith('nemo.') else k}={v}"
             for k, v in attrs.items() if k not in NOISE_ATTRIBUTES]
    more = f" (+{len(pairs) - limit})" if len(pairs) > limit else ""
    return ", ".join(pairs[:limit]) + more


def _fmt_s(seconds) -> str:
    if seconds is None or pd.isna(seconds):
        return "open"
    return f"{seconds * 1e3:,.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def _fmt_int(v) -> str:
    return "-" if v is None or pd.isna(v) else str(int(v))


def _indexed(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a 0..n-1 index: itself when it has one (a shared read is not copied)."""
    index = df.index
    if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        return df
    return df.reset_index(drop=True)


def _same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    if a is b:
        return True
    if len(a) != len(b) or list(a.columns) != list(b.columns):
        return False
    try:
        return bool(a.reset_index(drop=True).equals(b.reset_index(drop=True)))
    except (TypeError, ValueError):
        return False
