"""What the sessions of one dashboard server share, and what bounds them.

A served dashboard is one process and many browser sessions. Each session's ``DataStore``
holds its own selections (run, incident, filters, zoom), but the frames it reads and what it
derives from them are the same for every session looking at the same data, so they live once,
in the server's ``FrameCache``:

- keyed by what was read: (store, query, its parameters, the data's version). A read-only
  store file cannot change under its reader (DuckDB admits no writer beside it), so its
  version is fixed; any other store (the live collector's, a lake others write) has a version
  that moves every ``live_ttl_s``, so a reload storm shares one read while a later session
  still sees new rows;
- thread-safe, with one read in flight per key: sessions that ask for a frame another session
  is reading wait for that read instead of starting their own;
- bounded by bytes (``cache_bytes``), least recently used first out. A frame larger than the
  whole budget is handed to its reader and not kept.

Every read ends within ``read_timeout_s``: a timer interrupts DuckDB's cursor
(``DuckDBPyConnection.interrupt``) and the read raises ``ReadTimeout``, which the page shows and
the log records; a session never waits silently.

``Admission`` bounds the server as a whole: at most ``max_sessions`` sessions, a new session
only while the process's resident memory is below ``memory_bytes`` less the room one session
takes, at most ``max_builds`` sessions built at once (Bokeh builds a session on the server's
event loop, so one at a time there), and a page request that waited longer than
``build_wait_s`` for its turn since the server read it (a reload storm queues behind the
sessions being built) is answered with the "busy" page at once. A session ends, and leaves
its place, when its page closes, or when Bokeh drops a session no page connected to (a client
that gave up: 15 s by default). Everything the server holds is then bounded by
``memory_bytes``, the ``--memory-mib`` setting (``ROLLOUTSCOPE_DASHBOARD_MEMORY_MIB``): DuckDB's
own memory limit is a quarter of it, the cache half of it, and sessions are admitted only
while the process as a whole stays under it.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from rolloutscope.dashboard.defaults import (  # noqa: F401 - the settings' names, here too
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MEMORY_MIB,
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_WINDOW_MINUTES,
    DEFAULT_WINDOW_SPANS,
    MEMORY_ENV,
    READ_TIMEOUT_ENV,
    SESSIONS_ENV,
    WINDOW_MINUTES_ENV,
    WINDOW_SPANS_ENV,
)

log = logging.getLogger(__name__)

MiB = 1024 * 1024
# Arrow's batch size for a read (as RunStore.query_frame reads)
_ARROW_BATCH_ROWS = 1_000_000


class ReadTimeout(RuntimeError):
    """A read of the store did not finish within the dashboard's read time limit."""

    def __init__(self, what: str, timeout_s: float) -> None:
        self.what = what
        self.timeout_s = timeout_s
        super().__init__(f"reading {what} did not finish within {timeout_s:g} s and was "
                         f"stopped (the dashboard's read time limit, --read-timeout-s or "
                         f"{READ_TIMEOUT_ENV})")


@dataclass(frozen=True)
class DashboardLimits:
    """The bounds of one dashboard server (see the module doc)."""

    memory_mib: int = DEFAULT_MEMORY_MIB
    max_sessions: int = DEFAULT_MAX_SESSIONS
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    max_builds: int = 2
    build_wait_s: float = 10.0  # a page request that waited longer gets the busy page
    session_reserve_mib: int = 256  # the room a new session needs under the bound
    live_ttl_s: float = 5.0  # how long a read of a changing store is shared
    # window mode: a run of more spans has its interval views read for a stretch of time, the
    # last ``window_minutes`` when a session opens (``DataStore`` window)
    window_spans: int = DEFAULT_WINDOW_SPANS
    window_minutes: float = DEFAULT_WINDOW_MINUTES

    def __post_init__(self) -> None:
        if self.memory_mib < 256:
            raise ValueError(f"the dashboard's memory bound must be at least 256 MiB, got "
                             f"{self.memory_mib}")
        if self.max_sessions < 1 or self.max_builds < 1:
            raise ValueError("max_sessions and max_builds must be positive")
        if not self.read_timeout_s > 0:
            raise ValueError(f"the read time limit must be positive, got {self.read_timeout_s}")
        if self.window_spans < 0 or not self.window_minutes > 0:
            raise ValueError("the window mode's span count must be >= 0 and its minutes > 0")

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MiB

    @property
    def cache_bytes(self) -> int:
        return self.memory_bytes // 2

    @property
    def duckdb_mib(self) -> int:
        return max(self.memory_mib // 4, 64)

    @classmethod
    def from_env(cls, environ: dict | None = None, **given) -> DashboardLimits:
        """The limits from the environment, overridden by what is ``given`` (not None)."""
        env = os.environ if environ is None else environ
        out = {}
        for name, var, kind in (("memory_mib", MEMORY_ENV, int),
                                ("max_sessions", SESSIONS_ENV, int),
                                ("read_timeout_s", READ_TIMEOUT_ENV, float),
                                ("window_spans", WINDOW_SPANS_ENV, int),
                                ("window_minutes", WINDOW_MINUTES_ENV, float)):
            if given.get(name) is not None:
                out[name] = kind(given[name])
            elif env.get(var):
                try:
                    out[name] = kind(env[var])
                except ValueError:
                    raise ValueError(f"{var}={env[var]!r} is not a number") from None
        out.update({k: v for k, v in given.items() if v is not None and k not in out})
        return cls(**out)


def rss_bytes() -> int:
    """This process's resident memory (Linux /proc; 0 where unknown)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def value_bytes(value: object) -> int:
    """About what ``value`` holds in memory (frames by their columns' buffers)."""
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(index=True, deep=False).sum()) + sum(
            _object_bytes(value[c]) for c in value.columns if value[c].dtype == object)
    if isinstance(value, pd.Series):
        return int(value.memory_usage(deep=False)) + _object_bytes(value)
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, pa.Table):
        return int(value.nbytes)
    if isinstance(value, (tuple, list)) and len(value) <= 64:
        return 64 + sum(value_bytes(v) for v in value)
    if isinstance(value, (set, frozenset, dict, list, tuple)):
        return sys.getsizeof(value) + 64 * len(value)
    if hasattr(value, "__dataclass_fields__"):
        return 64 + sum(value_bytes(getattr(value, f)) for f in value.__dataclass_fields__)
    return sys.getsizeof(value)


def _object_bytes(s: pd.Series) -> int:
    """Python objects of an object column, estimated from a sample (a full pass over a million
    strings would cost more than the read)."""
    if s.dtype != object or not len(s):
        return 0
    sample = s.iloc[:: max(1, len(s) // 200)]
    per = sum(sys.getsizeof(v) for v in sample) / max(len(sample), 1)
    return int(per * len(s))


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    waits: int = 0  # a read another session had in flight
    evicted: int = 0
    too_large: int = 0


class FrameCache:
    """A thread-safe, byte-bounded LRU of values keyed by what was read (module doc)."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = int(budget_bytes)
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._flying: dict[Hashable, Future] = {}
        self.bytes = 0
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, key: Hashable) -> object | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            self.stats.hits += 1
            return hit[0]

    def get(self, key: Hashable, compute: Callable[[], object]) -> object:
        """The value for ``key``: kept, read by another caller now, or ``compute()``d here.
        A ``compute`` that raises raises in every caller waiting on it, and nothing is kept."""
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self.stats.hits += 1
                return hit[0]
            flying = self._flying.get(key)
            if flying is None:
                mine = self._flying[key] = Future()
                self.stats.misses += 1
            else:
                self.stats.waits += 1
        if flying is not None:
            return flying.result()
        try:
            value = compute()
        except BaseException as exc:
            with self._lock:
                del self._flying[key]
            mine.set_exception(exc)
            raise
        self._keep(key, value)
        with self._lock:
            del self._flying[key]
        mine.set_result(value)
        return value

    def _keep(self, key: Hashable, value: object) -> None:
        size = value_bytes(value)
        with self._lock:
            if size > self.budget_bytes:
                self.stats.too_large += 1
                log.warning("a read of %.0f MiB is larger than the dashboard's cache "
                            "(%.0f MiB): not kept", size / MiB, self.budget_bytes / MiB)
                return
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._entries[key] = (value, size)
            self.bytes += size
            while self.bytes > self.budget_bytes and self._entries:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.bytes -= dropped
                self.stats.evicted += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0

    def drop_if(self, stale: Callable[[Hashable], bool]) -> int:
        """Drop every kept value whose key is ``stale``; how many."""
        with self._lock:
            keys = [k for k in self._entries if stale(k)]
            for k in keys:
                self.bytes -= self._entries.pop(k)[1]
        return len(keys)


def timed_frame(store, sql: str, params: list | None, timeout_s: float, *,
                arrow_text: bool = True, what: str = "the store") -> pd.DataFrame:
    """``store.query_frame(sql, params)`` (``query_df`` without ``arrow_text``), interrupted
    after ``timeout_s``: raises ``ReadTimeout`` instead of waiting on."""
    from rolloutscope.store.store import arrow_frame

    if getattr(store, "remote", False):  # through a collector: its deadline, and ours
        from rolloutscope.store.remote import RemoteReadTimeout

        try:
            table = store.query_arrow(sql, params, timeout_s=timeout_s)
        except RemoteReadTimeout as exc:
            raise ReadTimeout(what, timeout_s) from exc
        return arrow_frame(table) if arrow_text else store._relation(table).df()
    fired = threading.Event()
    with store.cursor() as cur:
        def stop() -> None:
            fired.set()
            cur.interrupt()

        timer = threading.Timer(timeout_s, stop)
        timer.daemon = True
        timer.start()
        try:
            result = cur.execute(sql, params or [])
            if arrow_text:
                table = result.to_arrow_table(_ARROW_BATCH_ROWS)
            else:
                frame = result.df()
        except Exception as exc:
            if fired.is_set():
                raise ReadTimeout(what, timeout_s) from exc
            raise
        finally:
            timer.cancel()
        if fired.is_set():  # it fired as the read finished: the cursor may hold an interrupt
            raise ReadTimeout(what, timeout_s)
    if not arrow_text:
        return frame
    if table.num_rows < _ARROW_BATCH_ROWS:
        # as RunStore.query_frame: a small result is copied to its own size
        table = table.take(pa.array(np.arange(table.num_rows)))
    return arrow_frame(table)


_TOKENS = itertools.count(1)


def new_token() -> int:
    """A token no frame has had: what a frame read or merged by one session alone is known
    by in the shared cache's keys."""
    return next(_TOKENS)


class Admission:
    """Which page requests get a session (module doc); thread-safe."""

    def __init__(self, limits: DashboardLimits, *, rss: Callable[[], int] = rss_bytes) -> None:
        self.limits = limits
        self._rss = rss
        self._lock = threading.Lock()
        self._builds = threading.BoundedSemaphore(limits.max_builds)
        self.sessions = 0
        self.refused = 0

    def refusal(self, waited_s: float = 0.0) -> str | None:
        """Why a new session cannot be built now, or None (then ``enter`` it)."""
        lim = self.limits
        if waited_s > lim.build_wait_s:
            return (f"this page waited {waited_s:,.1f} s for the sessions being built before "
                    f"it (limit {lim.build_wait_s:g} s)")
        with self._lock:
            if self.sessions >= lim.max_sessions:
                return (f"{self.sessions} sessions are open, the limit (--max-sessions or "
                        f"{SESSIONS_ENV})")
        rss = self._rss()
        room = lim.memory_bytes - lim.session_reserve_mib * MiB
        if rss and rss > room:
            return (f"the dashboard holds {rss / MiB:,.0f} MiB of its {lim.memory_mib:,} MiB "
                    f"bound (--memory-mib or {MEMORY_ENV}), and a session needs "
                    f"{lim.session_reserve_mib} MiB")
        return None

    def enter(self) -> bool:
        """Take a build slot within ``build_wait_s``, and count the session: False when no
        slot came free (busy)."""
        if not self._builds.acquire(timeout=self.limits.build_wait_s):
            return False
        with self._lock:
            self.sessions += 1
        return True

    def built(self) -> None:
        """The session's build ended (it is shown, or its error is)."""
        self._builds.release()

    def leave(self) -> None:
        with self._lock:
            self.sessions = max(0, self.sessions - 1)


def _older(key: object, bucket: int, depth: int = 0) -> bool:
    """Whether ``key`` holds a changing store's version older than ``bucket`` (in a read's
    key, or in the tokens of a derived value's)."""
    if not isinstance(key, tuple) or depth > 3:
        return False
    if len(key) == 2 and key[0] == "until" and isinstance(key[1], int):
        return key[1] < bucket
    return any(_older(k, bucket, depth + 1) for k in key)


def shareable(token: object) -> bool:
    """Whether a frame's token is the same for every session (a shared read, or a view's
    empty frame), not one session's own rows."""
    return isinstance(token, tuple) and token[:1] in (("read",), ("empty",))


@dataclass
class SharedReads:
    """One dashboard server's shared state: its limits, cache and admission."""

    limits: DashboardLimits = field(default_factory=DashboardLimits)
    cache: FrameCache = field(init=False)
    admission: Admission = field(init=False)

    def __post_init__(self) -> None:
        self.cache = FrameCache(self.limits.cache_bytes)
        self.admission = Admission(self.limits)
        self._bucket: int | None = None

    def data_version(self, store) -> Hashable:
        """What a read of ``store`` is valid for (module doc). When a changing store's
        version moves, what was read (and derived) under older ones is dropped: a live
        server keeps no stale frames."""
        if getattr(store, "read_only", False) and not getattr(store, "is_lake", False):
            return ("fixed",)
        bucket = int(time.monotonic() // self.limits.live_ttl_s)
        if bucket != self._bucket:
            self._bucket = bucket
            self.cache.drop_if(lambda key: _older(key, bucket))
        return ("until", bucket)

    def limit_duckdb(self, store) -> None:
        """DuckDB's memory limit for ``store``, within the dashboard's bound. Not for the
        collector's store: the collector sets its own (--store-memory-mib)."""
        if getattr(store, "remote", False):
            return
        try:
            with store.cursor() as cur:
                cur.execute(f"SET memory_limit = '{int(self.limits.duckdb_mib)}MiB'")
        except Exception as exc:  # noqa: BLE001 - a bound not set is said, not fatal
            log.warning("could not set DuckDB's memory limit for the dashboard: %s", exc)
