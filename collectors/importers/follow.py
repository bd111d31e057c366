"""``rolloutscope follow rl-log FILE --collector URL``: a controller's stdout, live.

Tails the log as the controller writes it and streams what the ``rl-log`` importer derives from
each line (shard stays and transitions, stalls, re-dispatches, train steps, weight syncs, and
every line into ``logs``) to a running collector over OTLP/HTTP. The same assembler as the
importer, so a followed run and an imported one have the same spans.

- **Partial lines** wait until their newline arrives (a line being written is never parsed
  half-way).
- **Rotation**: when the path names a new file (rename-and-create) the rest of the old file is
  read first; when the file shrinks in place (copytruncate) reading restarts at its beginning.
  Each file generation gets its own name in the rows, so span ids never collide across them.
- **Live state**: a shard's current stay is sent as an open interval, so the dashboard shows it
  before the next transition closes it.
- **Delivery**: a batch is resent on 429/503 (honouring Retry-After) and on connection errors,
  with capped backoff; reading waits meanwhile, so memory stays bounded. A batch the collector
  refuses as malformed (other 4xx) is counted and dropped, never retried forever.

Lines without a timestamp prefix take the time they were read.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rolloutscope.collectors.importers.report import ImportReport
from rolloutscope.collectors.importers.rl_log import RlLogAssembler
from rolloutscope.collectors.otlp.encode import encode_logs, encode_spans
from rolloutscope.store import RowBatch

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 4 << 20  # read at most this much per poll: bounded memory on a huge backlog
MAX_BACKOFF_S = 10.0
PROTOBUF = "application/x-protobuf"


class LogTail:
    """Complete lines appended to a file since the last call, following rotation."""

    def __init__(self, path: str | Path, *, from_end: bool = False) -> None:
        self.path = Path(path)
        self.generation = 0  # bumped each time the path names a new file
        self._fh = None
        self._ino: int | None = None
        self._buf = b""
        self._from_end = from_end

    def _open(self) -> bool:
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - held open across calls
        except FileNotFoundError:
            return False
        if self._fh is not None:
            self._fh.close()
            self.generation += 1
        self._fh, self._ino, self._buf = fh, os.fstat(fh.fileno()).st_ino, b""
        if self._from_end:
            fh.seek(0, os.SEEK_END)
            self._from_end = False
        return True

    def _drain(self, *, final: bool = False) -> list[str]:
        data = self._fh.read(READ_CHUNK_BYTES)
        self._buf += data
        *complete, self._buf = self._buf.split(b"\n")
        if final and self._buf:
            complete.append(self._buf)  # a rotated file's last line is finished for good
            self._buf = b""
        return [line.decode("utf-8", "replace") for line in complete]

    def read_lines(self) -> list[str]:
        if self._fh is None and not self._open():
            return []
        lines = self._drain()
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return lines  # between a rename and the new file's creation
        if st.st_ino != self._ino:
            while chunk := self._drain(final=True):
                lines += chunk
            if self._open():
                lines += self._drain()
        elif st.st_size < self._fh.tell():
            self._fh.seek(0)  # truncated in place: the part line before it is lost with it
            self._buf = b""
            lines += self._drain()
        return lines

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class _LiveClock:
    """A line's own timestamp when it has one, else the time it was read."""

    mode = "live"

    def __init__(self, now_ns: Callable[[], int] = time.time_ns) -> None:
        self._now_ns = now_ns
        self._now = now_ns()

    def line(self, ts_ns: int | None) -> int:
        self._now = ts_ns if ts_ns is not None else self._now_ns()
        return self._now

    def lasting(self, seconds: float) -> tuple[int, int]:
        return self._now - round(seconds * 1e9), self._now

    def not_before(self, ns: int) -> int:
        return self._now


class DeliveryError(Exception):
    """The collector refused a batch as malformed (not worth resending)."""


@dataclass
class FollowStats:
    lines: int = 0
    batches_sent: int = 0
    batches_refused: int = 0
    retries: int = 0


class Follower:
    """One followed log. ``step()`` reads what was appended and sends it; ``run()`` loops."""

    def __init__(self, path: str | Path, *, collector: str, run_id: str,
                 token: str | None = None, from_end: bool = False, timeout_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.tail = LogTail(path, from_end=from_end)
        self.report = ImportReport(kind="rl-log", run_id=run_id, files=[str(path)])
        self.assembler = RlLogAssembler(run_id=run_id, clock=_LiveClock(), report=self.report)
        self.collector = collector.rstrip("/")
        self._headers = {"Content-Type": PROTOBUF}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._timeout_s = timeout_s
        self._sleep = sleep
        self._numbers: dict[int, int] = {}  # generation -> lines read from it
        self.stats = FollowStats()

    def step(self, stop: threading.Event | None = None) -> int:
        """Read the new complete lines, send what they produce; returns lines read."""
        lines = self.tail.read_lines()
        asm = self.assembler
        generation = self.tail.generation
        asm.begin_file(f"{self.tail.path.name}#{generation}", str(self.tail.path))
        number = self._numbers.get(generation, 0)
        for raw in lines:
            number += 1
            asm.feed(number, raw)
        self._numbers[generation] = number
        self.stats.lines += len(lines)
        asm.mark_open_stays()
        batch = asm.take_batch()
        if batch.rows:
            self._deliver(batch, stop)
        return len(lines)

    def _deliver(self, batch: RowBatch, stop: threading.Event | None) -> None:
        for route, request in (("/v1/traces", encode_spans(batch)),
                               ("/v1/logs", encode_logs(batch))):
            if request.ByteSize() == 0:
                continue
            try:
                self._post(route, request.SerializeToString(), stop)
                self.stats.batches_sent += 1
            except DeliveryError as exc:
                self.stats.batches_refused += 1
                log.error("collector refused a batch from %s: %s", self.tail.path, exc)

    def _post(self, route: str, body: bytes, stop: threading.Event | None) -> None:
        backoff = 0.5
        while True:
            req = urllib.request.Request(self.collector + route, data=body,
                                         headers=self._headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self._timeout_s):
                    return
            except urllib.error.HTTPError as exc:
                if exc.code not in (429, 502, 503, 504):
                    raise DeliveryError(f"HTTP {exc.code}: {exc.read()[:300]!r}") from None
                wait = _retry_after(exc.headers.get("Retry-After"), backoff)
            except (urllib.error.URLError, OSError) as exc:
                log.warning("collector at %s unreachable (%s); retrying", self.collector, exc)
                wait = backoff
            self.stats.retries += 1
            if stop is not None and stop.is_set():
                raise DeliveryError("stopped while the collector was not accepting")
            self._sleep(wait)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def run(self, stop: threading.Event, *, poll_s: float = 0.5) -> None:
        """Follow until ``stop`` is set, then send what was read last."""
        try:
            while not stop.is_set():
                if self.step(stop) == 0:
                    stop.wait(poll_s)
            self.step(stop)
        finally:
            self.tail.close()


def _retry_after(header: str | None, default: float) -> float:
    try:
        return min(max(float(header), 0.0), MAX_BACKOFF_S) if header else default
    except ValueError:
        return default
