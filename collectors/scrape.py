"""Engines' own Prometheus ``/metrics``, read on an interval into the run's metrics table.

A generation engine (vLLM, ``rolloutscope.dialects.vllm_metrics``) says on ``/metrics`` what it
is doing between requests: requests running and waiting, KV cache use, preemptions, and
histograms of each finished request's time queued and end to end. ``EngineScraper`` reads each
URL it is given every ``interval_s``, parses the text with ``prometheus_client``'s parser and
submits the points to the store's writer, like any metric point that arrives over OTLP.

The rule: scraping never slows ingest or another engine. Each engine has its own thread, so an
engine that hangs holds only its own read (bounded by ``timeout_s``) and one that refuses
connections only its own loop; the writer is given the points without waiting (a full queue
drops that scrape and counts it, as OTLP senders are refused then). A failed read, an answer
that is not Prometheus text, or a dropped scrape is logged (at most once per 10 s per engine and
kind) and counted in ``stats()``; the next read of a failing engine waits twice as long as the
last, up to ``max_backoff_s``, and the first read that works goes back to ``interval_s``.

What a scrape stores, one ``metrics`` row per series (``points``): the family's declared name
(a counter's ``_total`` and a histogram's ``_count`` / ``_sum`` / ``_bucket`` suffixes dropped),
kind ``gauge`` (gauges, untyped), ``sum`` (counters) or ``histogram`` / ``summary`` (with count
and sum; bucket and quantile samples are not kept), the series' labels as attributes, the
instant the answer arrived as ``ts_ns`` (or the sample's own timestamp), the engine's address
``host:port`` as service and the resource ``{url.full, server.address, server.port}``. The run is
left to the writer, which files the rows under the store's default run (``rows.RUN_RULE``):
the run ``serve`` files spans without one under.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from rolloutscope.collectors.otlp.connections import RateLimitedLog
from rolloutscope.store.errors import QueueFullError, StoreError
from rolloutscope.store.rows import RowBatch
from rolloutscope.vocabulary import Attr

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0
MAX_BODY_BYTES = 16 * 1024 * 1024  # a vLLM server's /metrics is tens of KiB
ACCEPT = "text/plain;version=0.0.4"  # the classic text format, which every exporter serves


class ScrapeTargetError(ValueError):
    """A ``--scrape`` URL that cannot be read: not http(s), or without a host."""


@dataclass(frozen=True, kw_only=True)
class EngineTarget:
    """One engine's ``/metrics``: its URL and its address (``host:port``), which names it."""

    url: str
    host: str
    port: int

    @property
    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def resource(self) -> str:
        return orjson.dumps({Attr.URL_FULL: self.url, Attr.SERVER_ADDRESS: self.host,
                             Attr.SERVER_PORT: self.port}).decode()


def engine_target(url: str) -> EngineTarget:
    """``url`` as a target; a URL without a path reads ``/metrics``. Raises
    ``ScrapeTargetError`` naming the URL and what is wrong with it."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ScrapeTargetError(f"scrape URL {url!r}: must start with http:// or https://")
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # a port that is not a number, or out of range
        raise ScrapeTargetError(f"scrape URL {url!r}: {exc}") from None
    if not host:
        raise ScrapeTargetError(f"scrape URL {url!r}: names no host")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    port = port if port is not None else (443 if parts.scheme == "https" else 80)
    return EngineTarget(url=urlunsplit((parts.scheme, parts.netloc, path, parts.query, "")),
                        host=host, port=port)


@dataclass(frozen=True, kw_only=True)
class ScrapeConfig:
    targets: tuple[EngineTarget, ...]
    interval_s: float = DEFAULT_INTERVAL_S
    timeout_s: float | None = None
    """The longest one read may take; None: the interval, at most 10 s."""
    max_backoff_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("interval_s", "max_backoff_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        urls = [t.url for t in self.targets]
        if len(set(urls)) != len(urls):
            raise ValueError(f"a scrape URL is given twice: {sorted(urls)}")

    @property
    def read_timeout_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else min(self.interval_s, 10.0)


class GarbageError(ValueError):
    """An engine's answer that is not Prometheus text."""


def points(text: str, *, target: EngineTarget, ts_ns: int, run_id: str | None = None
           ) -> RowBatch:
    """The ``metrics`` rows of one scrape (see the module docstring), in ``run_id`` (None: the
    writer's default run). Raises ``GarbageError`` when ``text`` is not Prometheus text; then
    none of it is kept."""
    # imported on the first scrape: a collector that scrapes nothing never loads the package
    # (about 70 ms, most of it its process and platform collectors)
    from prometheus_client.parser import text_string_to_metric_families

    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises what its input makes it raise
        raise GarbageError(f"not Prometheus text: {exc}"[:300]) from None
    batch = RowBatch()
    common = {"run_id": run_id, "service": target.authority, "resource": target.resource}
    for family in families:
        if family.name.endswith("_created"):  # a series' creation time, not a reading
            continue
        for row in _family_rows(family, ts_ns):
            batch.add_row("metrics", **common, **row)
    return batch


def _family_rows(family, ts_ns: int) -> Iterable[dict[str, Any]]:
    unit = family.unit or None
    if family.type in ("histogram", "summary", "gaugehistogram"):
        series: dict[tuple, dict[str, Any]] = {}
        for s in family.samples:
            suffix = s.name[len(family.name):]
            if suffix not in ("_count", "_sum", "_gcount", "_gsum"):
                continue  # buckets and quantiles
            labels = tuple(sorted(s.labels.items()))
            row = series.setdefault(labels, {
                "name": family.name, "kind": "summary" if family.type == "summary"
                else "histogram", "ts_ns": _ts(s, ts_ns), "unit": unit,
                "attributes": _labels(s.labels)})
            if suffix.endswith("count"):
                row["count"] = int(s.value) if math.isfinite(s.value) else None
            else:
                row["sum"] = float(s.value)
        yield from series.values()
        return
    kind = "sum" if family.type == "counter" else "gauge"
    for s in family.samples:
        # a counter's value is its _total sample (its _created one is skipped)
        if family.type == "counter" and s.name != family.name + "_total" \
                and s.name != family.name:
            continue
        yield {"name": family.name if family.type == "counter" else s.name, "kind": kind,
               "ts_ns": _ts(s, ts_ns), "value": float(s.value), "unit": unit,
               "attributes": _labels(s.labels)}


def _ts(sample, ts_ns: int) -> int:
    stamp = sample.timestamp
    if stamp is None:
        return ts_ns
    return int(stamp * 1e9) if isinstance(stamp, float | int) else stamp.sec * 10**9 + stamp.nsec


def _labels(labels: dict[str, str]) -> str | None:
    return orjson.dumps(dict(sorted(labels.items()))).decode() if labels else None


def next_backoff(config: ScrapeConfig, backoff_s: float, *, ok: bool) -> float:
    """The wait before the next read after a failed one (0 after one that worked): the
    interval after a first failure, then twice the last wait, up to ``max_backoff_s``."""
    if ok:
        return 0.0
    return min(config.max_backoff_s, max(config.interval_s, backoff_s * 2))


@dataclass
class EngineStats:
    """What happened to one engine's reads (``stats()``; serve's ``/metrics`` route)."""

    scrapes: int = 0  # reads whose points were given to the writer
    points: int = 0
    failures: int = 0  # reads that got no answer, or an HTTP error
    garbage: int = 0  # answers that were not Prometheus text
    dropped: int = 0  # scrapes the writer's full queue refused
    consecutive_failures: int = 0
    last_error: str | None = None
    last_ok_ns: int | None = None
    backoff_s: float = 0.0


@dataclass
class _Engine:
    target: EngineTarget
    stats: EngineStats = field(default_factory=EngineStats)
    thread: threading.Thread | None = None


class EngineScraper:
    """Reads every target on its own thread until ``stop()`` (see the module docstring).

    ``submit`` is the writer's non-blocking ``submit``; ``fetch(url, timeout_s)`` returns the
    body (urllib over HTTP unless a test gives another); ``clock`` gives ``ts_ns``."""

    def __init__(self, config: ScrapeConfig, *, submit: Callable[[RowBatch], Any],
                 fetch: Callable[[str, float], bytes] | None = None,
                 clock: Callable[[], int] = time.time_ns) -> None:
        self.config = config
        self._submit = submit
        self._fetch = fetch or read_metrics
        self._clock = clock
        self._stop = threading.Event()
        self._log = RateLimitedLog(log)
        self._engines = [_Engine(t) for t in config.targets]

    def start(self) -> EngineScraper:
        for engine in self._engines:
            engine.thread = threading.Thread(target=self._loop, args=(engine,), daemon=True,
                                             name=f"scrape {engine.target.authority}")
            engine.thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every loop; a read in progress is left to its timeout (its thread is a daemon,
        and what it reads after this is not submitted)."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for engine in self._engines:
            if engine.thread is not None:
                engine.thread.join(max(0.0, deadline - time.monotonic()))

    def stats(self) -> dict[str, dict[str, Any]]:
        return {e.target.url: dict(vars(e.stats)) for e in self._engines}

    def _loop(self, engine: _Engine) -> None:
        while not self._stop.is_set():
            try:
                ok = self.scrape_once(engine)
            except Exception as exc:  # noqa: BLE001 - a bug here must not end this engine's reads
                engine.stats.failures += 1
                engine.stats.last_error = f"{type(exc).__name__}: {exc}"[:300]
                self._log.warning(f"{engine.target.url} bug", "scrape %s: %s", engine.target.url,
                                  engine.stats.last_error)
                ok = False
            engine.stats.backoff_s = next_backoff(self.config, engine.stats.backoff_s, ok=ok)
            self._stop.wait(engine.stats.backoff_s or self.config.interval_s)

    def scrape_once(self, engine: _Engine) -> bool:
        """One read of one engine; True when it answered with Prometheus text."""
        st, url = engine.stats, engine.target.url
        try:
            body = self._fetch(url, self.config.read_timeout_s)
        except Exception as exc:  # noqa: BLE001 - whatever a read raises fails only this read
            st.failures += 1
            st.consecutive_failures += 1
            st.last_error = f"{type(exc).__name__}: {exc}"[:300]
            self._log.warning(f"{url} read", "scrape %s failed (%d in a row): %s", url,
                              st.consecutive_failures, st.last_error)
            return False
        ts_ns = self._clock()
        try:
            text = body.decode("utf-8")
            batch = points(text, target=engine.target, ts_ns=ts_ns)
        except (UnicodeDecodeError, GarbageError) as exc:
            st.garbage += 1
            st.consecutive_failures += 1
            st.last_error = str(exc)[:300]
            self._log.warning(f"{url} garbage", "scrape %s: the answer was not Prometheus "
                              "text, nothing of it kept: %s", url, st.last_error)
            return False
        st.consecutive_failures = 0
        st.last_ok_ns = ts_ns
        if self._stop.is_set() or not batch.rows:
            return True
        try:
            self._submit(batch)
        except QueueFullError as exc:
            st.dropped += 1
            self._log.warning(f"{url} dropped", "scrape %s dropped: %s", url, exc)
            return True
        except StoreError as exc:  # the writer is closing: serve is stopping
            log.debug("scrape %s not stored: %s", url, exc)
            self._stop.set()
            return True
        st.scrapes += 1
        st.points += batch.rows
        return True


def read_metrics(url: str, timeout_s: float) -> bytes:
    """GET ``url`` (at most ``MAX_BODY_BYTES``); raises on no answer or a non-2xx one."""
    request = urllib.request.Request(url, headers={"Accept": ACCEPT})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - http(s)
        body = response.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise GarbageError(f"answer larger than {MAX_BODY_BYTES} bytes")
    return body
