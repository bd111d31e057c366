"""Transport-independent export handling, and the bridge from the event loop to the writer.

``OtlpReceiver`` is what both transports call: ``decode`` (parse + decode, pure), then
``commit``: ``enqueue(batch)`` and wait for the commit, counting every outcome. It knows only
the ``enqueue`` callable. ``CommitQueue`` is that callable in the service: it submits to the
store's writer without blocking (a full queue is ``BackpressureError``, never unbounded
buffering) and completes an asyncio future when the writer has committed the batch. A batch the
store could not hold fails as ``BadRequestError`` (the data's fault, 400), a store failure as
``UnavailableError`` (503): either only for the requests whose rows the commit held.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rolloutscope.collectors.otlp import fastdecode
from rolloutscope.collectors.otlp.counters import CollectorCounters
from rolloutscope.collectors.otlp.decode import (
    PROTOBUF,
    Decoded,
    decode_request,
    parse_request,
)
from rolloutscope.collectors.otlp.errors import (
    BackpressureError,
    BadRequestError,
    UnavailableError,
)
from rolloutscope.collectors.otlp.limits import DecodeLimits
from rolloutscope.collectors.otlp.signals import Signal
from rolloutscope.store.errors import QueueFullError, StoreError, UnstorableBatchError
from rolloutscope.store.rows import RowBatch

log = logging.getLogger(__name__)

# enqueue(batch, nbytes=..., submitted=...): ``submitted`` is called once the writer has the batch
Enqueue = Callable[..., Awaitable[None]]
_REMEMBERED_REFUSALS = 8_192  # fingerprints of bodies refused for backpressure


@dataclass(frozen=True)
class ExportResult:
    accepted: int
    rejected: int
    message: str  # the partial-success error message; empty when nothing was rejected


class Arrival:
    """One request between its arrival and the hand-over of its rows to the writer (or its
    end): while any is open, the writer waits for it to join the group commit."""

    __slots__ = ("_receiver", "_open")

    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver
        self._open = True
        receiver.arriving += 1

    def done(self) -> None:
        if self._open:
            self._open = False
            self._receiver.arriving -= 1
            self._receiver.on_arrived()


class OtlpReceiver:
    """Decodes requests (``decode``, synchronous: pure CPU, on the event loop) and commits their
    rows (``commit``, awaiting the writer). The transports keep the two apart so that the body
    and the parsed message are gone before a request waits for its commit: only its rows are
    held in flight."""

    def __init__(self, *, enqueue: Enqueue, limits: DecodeLimits,
                 counters: CollectorCounters) -> None:
        self._enqueue = enqueue
        self.limits = limits
        self.counters = counters
        self.arriving = 0  # requests read or decoded, not yet handed to the writer (``Arrival``)
        self.on_arrived: Callable[[], None] = lambda: None
        # A stock exporter retries with the identical body, so a body refused for
        # backpressure and later accepted is a retry: its items count as retried.
        self._refused: OrderedDict[tuple[int, int], None] = OrderedDict()

    def arrive(self) -> Arrival:
        """Count a request from its arrival; ``commit`` (or the transport, at the end) closes
        it."""
        return Arrival(self)

    def decode(self, signal: Signal, body: bytes, encoding: str) -> Decoded:
        """Rows of a (decompressed) body. The transport counts ``BadRequestError.problem``;
        this counts items. A protobuf trace body goes to the compiled decoder first; what
        it declines (anything to reject or coerce, see ``fastdecode``) the reference decodes."""
        if signal is Signal.TRACES and encoding == PROTOBUF:
            fast = fastdecode.decode_traces(body, self.limits)
            if fast is not None:
                fast.nbytes = len(body)
                return fast
        try:
            decoded: Decoded = decode_request(signal, parse_request(signal, body, encoding),
                                              self.limits)
        except BadRequestError as exc:
            self.counters.rejected_invalid[signal] += _items_in(exc)
            raise
        if decoded.rejected:
            self.counters.rejected_invalid[signal] += decoded.rejected
            self.counters.problems["invalid_items"] += 1
        if decoded.batch.coerced:
            self.counters.problems["coerced_values"] += 1
        decoded.nbytes = len(body)
        return decoded

    async def commit(self, signal: Signal, decoded: Decoded, *,
                     fingerprint: tuple[int, int] | None = None,
                     arrival: Arrival | None = None) -> ExportResult:
        """Commit the decoded rows; returns once they are in the file."""
        done = arrival.done if arrival is not None else _nothing
        if not decoded.accepted:
            done()
        else:
            try:
                await self._enqueue(decoded.batch, nbytes=decoded.nbytes, submitted=done)
            except BackpressureError:
                done()
                self.counters.rejected_backpressure[signal] += decoded.accepted
                if fingerprint is not None:
                    self._remember_refusal(fingerprint)
                raise
            except BadRequestError:  # the rows could not be stored: the data's fault
                done()
                self.counters.rejected_invalid[signal] += decoded.accepted
                raise
            self.counters.accepted[signal] += decoded.accepted
            if fingerprint is not None and fingerprint in self._refused:
                del self._refused[fingerprint]
                self.counters.retried[signal] += decoded.accepted
        return ExportResult(decoded.accepted, decoded.rejected,
                            decoded.message(signal.item_noun))

    async def export(self, signal: Signal, body: bytes, encoding: str) -> ExportResult:
        """``decode`` then ``commit``, for callers that hold the body anyway."""
        decoded = self.decode(signal, body, encoding)
        return await self.commit(signal, decoded, fingerprint=fingerprint(body))

    def _remember_refusal(self, fingerprint: tuple[int, int]) -> None:
        self._refused[fingerprint] = None
        self._refused.move_to_end(fingerprint)
        while len(self._refused) > _REMEMBERED_REFUSALS:
            self._refused.popitem(last=False)


def _nothing() -> None:
    pass


def fingerprint(body: bytes) -> tuple[int, int]:
    """What tells a retried body from a new one (a stock exporter resends it unchanged)."""
    return (zlib.crc32(body), len(body))


def _items_in(exc: BadRequestError) -> int:
    """Items a wholly rejected request carried, from its message ('rejected N of M ...')."""
    words = exc.message.split()
    if len(words) > 3 and words[0] == "rejected" and words[1].isdigit():
        return int(words[1])
    return 0


class CommitQueue:
    """``enqueue`` for the receivers: submit to the writer, await the commit.

    One waiter thread completes futures in submission order; the writer commits batches in
    that order, so waiting on the oldest first never delays a later batch for long.
    """

    _STOP = object()

    def __init__(self, writer, *, retry_after_s: float) -> None:
        self._writer = writer
        self.retry_after_s = retry_after_s
        self._pending: queue.SimpleQueue = queue.SimpleQueue()
        self._closing = False
        self._thread = threading.Thread(target=self._wait_commits,
                                        name="rolloutscope-commit-waiter", daemon=True)
        self._thread.start()

    async def enqueue(self, batch: RowBatch, *, nbytes: int | None = None,
                      submitted: Callable[[], None] = _nothing) -> None:
        if self._closing:
            raise UnavailableError("collector is shutting down", self.retry_after_s)
        try:
            commit = self._writer.submit(batch, block=False, nbytes=nbytes)
        except QueueFullError as exc:
            raise BackpressureError(f"collector is at capacity ({exc})",
                                    self.retry_after_s) from None
        except StoreError as exc:
            raise UnavailableError(f"store cannot accept data: {exc}",
                                   self.retry_after_s) from None
        submitted()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.put((commit, loop, future))
        await future

    def _wait_commits(self) -> None:
        while True:
            item = self._pending.get()
            if item is self._STOP:
                return
            commit, loop, future = item
            try:
                commit.wait()
                outcome: BaseException | None = None
            except UnstorableBatchError as exc:
                outcome = BadRequestError("unstorable_rows",
                                          f"the request's rows cannot be stored: {exc}")
            except StoreError as exc:
                outcome = UnavailableError(f"commit failed: {exc}", self.retry_after_s)
            loop.call_soon_threadsafe(_settle, future, outcome)

    def close(self) -> None:
        """Refuse new batches; the waiter finishes every pending one first (FIFO) and stops."""
        self._closing = True
        self._pending.put(self._STOP)
        self._thread.join()


def _settle(future: asyncio.Future, error: BaseException | None) -> None:
    if future.done():  # the request was cancelled (client went away); the data is committed
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
