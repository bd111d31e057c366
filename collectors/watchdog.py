"""The watchdog: the incident detectors evaluated live beside the collector, and a failure
channel that tells someone.

Every ``interval_s`` one pass reads the ``incidents`` view (the maintained form where the store
keeps one, through a cursor of its own, as the live dashboard reads: the writer never waits on
it) for the recent window only: incidents that start at or after the data time the previous
pass had seen, less ``lookback_s`` of the runs (``lookback_s``), plus those already delivered
and not yet resolved. Each incident new to it is a notice, with the run's "waiting on" answer
(``rolloutscope.store.waiting``) at the last moment the store holds; one that was delivered and
has since ended is a second, "resolved", notice.

Dedupe rule: an incident is delivered once per (run, kind, subject, start), however often the
detectors see it again (its summary, which counts seconds, grows while it lasts); when the view
gives it an end, a "resolved" notice follows, once. The record of what was delivered lives in
the process: a collector started again delivers again the incidents in its first window.

Delay: a notice leaves at most one ``interval_s`` (plus one pass) after the spans that push a
detector past its threshold are committed, and those are committed within the collector's
commit delay (``--commit-max-delay-ms``) of arriving. docs/watchdog.md.

Delivery never blocks ingest or the passes: each channel (the command, the webhook) has its own
thread and a bounded queue; a full queue drops the notice and counts it. The command gets the
notice as JSON on stdin, once. The webhook gets it as a JSON POST, retried with exponential
backoff on a connection error, a timeout, 408, 429 or any 5xx, up to ``retries`` times.
"""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rolloutscope.store.store import RunStore
from rolloutscope.vocabulary import IncidentKind

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0
KINDS: tuple[str, ...] = tuple(k.value for k in IncidentKind)
IncidentKey = tuple[str, str, str, int]  # (run, kind, subject, start_ns): the dedupe key


@dataclass(frozen=True, kw_only=True)
class WatchdogConfig:
    """What ``rolloutscope serve --on-incident / --notify-url`` asked for."""

    on_incident: str | None = None  # a shell command; the notice as JSON on its stdin
    notify_url: str | None = None  # http(s) URL; the notice as a JSON POST
    kinds: frozenset[str] = frozenset(KINDS)  # the incident kinds delivered
    interval_s: float = DEFAULT_INTERVAL_S
    queue_size: int = 1000  # notices waiting per channel before new ones are dropped
    retries: int = 8  # webhook tries after the first
    backoff_s: float = 0.5  # the first retry's wait, doubled each time
    max_backoff_s: float = 30.0
    timeout_s: float = 10.0  # one command run, one POST

    def __post_init__(self) -> None:
        unknown = sorted(set(self.kinds) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown incident kind(s) {', '.join(unknown)}; "
                             f"known: {', '.join(KINDS)}")
        if not self.interval_s > 0:
            raise ValueError(f"the watch interval must be positive, got {self.interval_s}")
        if self.notify_url is not None and not self.notify_url.startswith(("http://",
                                                                           "https://")):
            raise ValueError(f"the notify URL must be http:// or https://, got "
                             f"{self.notify_url!r}")
        for name in ("queue_size", "timeout_s", "backoff_s", "max_backoff_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    @property
    def wanted(self) -> bool:
        return self.on_incident is not None or self.notify_url is not None


class IncidentBook:
    """The dedupe rule (module doc), and nothing else: which incidents were delivered and which
    of those were delivered resolved. Pure; no store, no clock."""

    def __init__(self) -> None:
        self._opened: set[IncidentKey] = set()
        self._resolved: set[IncidentKey] = set()

    @staticmethod
    def key(row: dict[str, Any]) -> IncidentKey:
        return (row["run_id"], row["kind"], row["subject"], int(row["start_ns"]))

    def news(self, rows: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        """("opened" | "resolved", row) for each row not yet told that way, in order."""
        out = []
        for row in rows:
            k = self.key(row)
            if k not in self._opened:
                self._opened.add(k)
                out.append(("opened", row))
            if row.get("end_ns") is not None and k not in self._resolved:
                self._resolved.add(k)
                out.append(("resolved", row))
        return out

    def unresolved_since(self) -> int | None:
        """The earliest start among incidents delivered and not yet resolved."""
        waiting = self._opened - self._resolved
        return min((k[3] for k in waiting), default=None)


class _Channel:
    """One delivery target on its own thread behind a bounded queue."""

    def __init__(self, name: str, send: Callable[[bytes], None], size: int) -> None:
        self.name = name
        self._send = send
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=size)
        self.delivered = self.failed = self.dropped = 0
        self._thread = threading.Thread(target=self._run, name=f"rolloutscope-{name}",
                                        daemon=True)
        self._thread.start()

    def offer(self, body: bytes) -> None:
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            self.dropped += 1
            log.warning("watchdog %s: %d notice(s) waiting; dropped one", self.name,
                        self._queue.qsize())

    def close(self, timeout_s: float) -> None:
        """Deliver what is queued within ``timeout_s``; a channel still stuck after it (a hung
        webhook) is left behind: its thread is a daemon."""
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while (body := self._queue.get()) is not None:
            try:
                self._send(body)
                self.delivered += 1
            except Exception as exc:  # noqa: BLE001 - a failed notice is logged, never raised
                self.failed += 1
                log.warning("watchdog %s: notice not delivered: %s", self.name, exc)


class DeliveryError(Exception):
    """A notice that its target refused or never took."""


def run_command(command: str, body: bytes, *, timeout_s: float) -> None:
    """Run ``command`` in a shell with ``body`` on its stdin, once."""
    try:
        done = subprocess.run(command, shell=True, input=body, timeout=timeout_s,
                              capture_output=True)
    except subprocess.TimeoutExpired:
        raise DeliveryError(f"{command!r} did not finish within {timeout_s:g} s") from None
    if done.returncode != 0:
        raise DeliveryError(f"{command!r} exited {done.returncode}: "
                            f"{done.stderr.decode(errors='replace')[-500:]}")


def post_json(url: str, body: bytes, *, timeout_s: float, retries: int, backoff_s: float,
              max_backoff_s: float, sleep: Callable[[float], None] = time.sleep) -> int:
    """POST ``body`` to ``url``; retried on a connection error, a timeout, 408, 429 or 5xx
    with exponential backoff. Returns the tries it took."""
    wait = backoff_s
    for attempt in range(1, retries + 2):
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as reply:
                reply.read()
            return attempt
        except urllib.error.HTTPError as exc:
            if not (exc.code >= 500 or exc.code in (408, 429)):
                raise DeliveryError(f"{url} answered {exc.code}; not retried") from None
            problem = f"{url} answered {exc.code}"
        except (urllib.error.URLError, OSError) as exc:  # refused, reset, timed out
            problem = f"{url}: {getattr(exc, 'reason', exc)}"
        if attempt > retries:
            raise DeliveryError(f"{problem}, after {attempt} tries")
        log.info("watchdog webhook: %s; retrying in %.1f s", problem, wait)
        sleep(wait)
        wait = min(wait * 2, max_backoff_s)
    raise AssertionError("unreachable")


@dataclass
class Watchdog:
    """The passes on one thread, the channels on theirs (module doc). ``clock``: wall time in
    epoch ns, stamped on each notice as ``detected_ns``."""

    store: RunStore
    config: WatchdogConfig
    clock: Callable[[], int] = time.time_ns
    book: IncidentBook = field(default_factory=IncidentBook)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._watermark: int | None = None
        self._rows_held: tuple | None = None
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.channels: list[_Channel] = []
        cfg = self.config
        if cfg.on_incident is not None:
            self.channels.append(_Channel("command", lambda b: run_command(
                cfg.on_incident, b, timeout_s=cfg.timeout_s), cfg.queue_size))
        if cfg.notify_url is not None:
            self.channels.append(_Channel("webhook", lambda b: post_json(
                cfg.notify_url, b, timeout_s=cfg.timeout_s, retries=cfg.retries,
                backoff_s=cfg.backoff_s, max_backoff_s=cfg.max_backoff_s,
                sleep=self._stop.wait), cfg.queue_size))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rolloutscope-watchdog",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0, deliver_s: float = 5.0) -> None:
        """End the passes (waiting ``timeout_s`` for one under way), then give each channel
        ``deliver_s`` to deliver what it holds: a hung webhook delays a collector's shutdown
        by that much at most."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        for ch in self.channels:
            ch.close(deliver_s)

    def _run(self) -> None:
        while not self._stop.wait(self.config.interval_s):
            try:
                if self.changed():
                    self.evaluate()
            except Exception as exc:  # noqa: BLE001 - the next pass tries again
                log.warning("watchdog pass failed: %s", exc)

    # -- one pass ------------------------------------------------------------------------------
    def changed(self) -> bool:
        """Whether the store holds rows the last call did not see: a pass over a store that
        received nothing since the last one is skipped (its views cannot have changed; with
        nothing arriving, the detectors, which run on the run's own clock, cannot move)."""
        rows_held = self.store.query(
            "SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM span_events), "
            "(SELECT count(*) FROM metrics), (SELECT count(*) FROM open_spans)")[0]
        changed, self._rows_held = rows_held != self._rows_held, rows_held
        return changed

    def evaluate(self) -> list[dict[str, Any]]:
        """One pass: the notices it handed to the channels."""
        watermark, lookback_ns = self._data_time()
        if watermark is None:
            return []
        floor = (self._watermark if self._watermark is not None else watermark) - lookback_ns
        pending = self.book.unresolved_since()
        if pending is not None:
            floor = min(floor, pending)
        rows = self._incidents(floor)
        self._watermark = watermark
        self.passes += 1
        answers: dict[str, dict | None] = {}
        notices = []
        for event, row in self.book.news(rows):
            if event == "opened" and row["run_id"] not in answers:
                answers[row["run_id"]] = self._waiting(row["run_id"])
            notice = {"event": event, **row, "detected_ns": self.clock(),
                      "data_until_ns": watermark,
                      "waiting_on": answers.get(row["run_id"]) if event == "opened" else None}
            notices.append(notice)
            body = json.dumps(notice).encode()
            for ch in self.channels:
                ch.offer(body)
        return notices

    def _data_time(self) -> tuple[int | None, int]:
        """The last instant any run was seen, and the window's lookback: the longest threshold
        a detector waits out, times the tries the try-counting detectors (retry storm,
        re-dispatch exhausted) need before they see an incident."""
        row = self.store.query(
            "SELECT max(end_ns), max(greatest(stall_timeout_s, prepare_timeout_s, lease_grace_s, "
            "backend_timeout_s, coalesce(rollout_timeout_s, 0)) "
            "* (max_infra_attempts_per_prompt + 1)) "
            f"FROM {self.store.relation('run_thresholds')}")[0]
        return (None if row[0] is None else int(row[0])), int((row[1] or 3600.0) * 1e9)

    def _incidents(self, floor_ns: int) -> list[dict[str, Any]]:
        kinds = sorted(self.config.kinds)
        sql = (f"SELECT i.run_id, i.incident_id, i.kind, i.severity, i.start_ns, i.end_ns, "
               f"round((i.start_ns - t.origin_ns) / 1e9, 3) AS start_s, i.subject, i.summary, "
               f"i.evidence, i.caused_by FROM {self.store.relation('incidents')} i "
               f"LEFT JOIN {self.store.relation('run_thresholds')} t USING (run_id) "
               f"WHERE i.start_ns >= ? AND list_contains(?, i.kind) "
               f"ORDER BY i.start_ns, i.run_id, i.kind, i.subject")
        with self.store.cursor() as cur:
            cur.execute(sql, [floor_ns, kinds])
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, r)) for r in cur.fetchall()]
        for r in rows:
            r["evidence"] = [str(x) for x in (r["evidence"] or [])]
        return rows

    def _waiting(self, run_id: str) -> dict | None:
        from rolloutscope.store.waiting import waiting_on

        try:
            return waiting_on(self.store, run_id).to_dict()
        except Exception as exc:  # noqa: BLE001 - the incident goes out without it
            log.warning("watchdog: what run %s waits on could not be read: %s", run_id, exc)
            return None
