"""StoreWriter: the single appender of a run store, with group commit and a bounded queue.

Any thread may ``submit`` a ``RowBatch``; one writer thread appends everything queued, table by
table through Arrow (never row-by-row), in one transaction, and then completes each batch's
``Commit``. A commit happens when the rows gathered reach ``max_rows``, their bytes
``max_bytes``, or the oldest gathered batch is ``max_delay_ms`` old, whichever comes first; a
writer told what is on its way (``group_with``: the collector's requests being read and decoded)
commits once nothing more has been for ``linger_ms``, since every sender waiting for an
acknowledgement then is in the group already. So commits are as large as the concurrent senders make them (DuckDB's
append costs several times more per row at 1,000-row commits than at 50,000), and a lone
sender's request is not held for the time bound. A completed ``Commit`` means the rows are
in the file (DuckDB's WAL), so a caller that waits for it before acknowledging never loses
acknowledged data to a crash.

A group commit that fails is retried batch by batch, so a batch that cannot be stored fails its
own ``Commit`` (``UnstorableBatchError``: the data's fault) and never the other batches it was
grouped with; a failure of the store itself fails the batches it held.

The queue is bounded in rows: ``submit`` raises ``QueueFullError`` instead of buffering without
bound, so the caller can apply backpressure (the collector answers 429) or count a drop (the
in-process exporter).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from rolloutscope.store import derived, lake
from rolloutscope.store.errors import (
    QueueFullError,
    StoreError,
    UnstorableBatchError,
    translate,
)
from rolloutscope.store.rows import RowBatch
from rolloutscope.store.schema import BATCH_TABLES

log = logging.getLogger(__name__)

DEFAULT_MAX_ROWS = 50_000
DEFAULT_MAX_DELAY_MS = 50
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# How long "nothing is arriving" must last before a group commits: senders acknowledged by the
# previous commit send again within a millisecond or two, and a commit that waits for them is
# several times larger (and cheaper per row) than one that goes without them.
DEFAULT_LINGER_MS = 3.0
ROW_BYTES_ESTIMATE = 256  # a batch submitted without its size counts this much per row
DEFAULT_MAX_QUEUED_ROWS = 2_000_000
ARROW_SLICE_ROWS = 50_000  # rows converted to Arrow and inserted at once, within a commit
LAKE_COMMIT_ATTEMPTS = 200  # a lake commit that loses this many races in a row fails

# DuckDB checkpoints the WAL into the file once it exceeds this. At DuckDB's default (16 MB,
# about 45k spans) every checkpoint recompresses the table's last, partly filled row group
# (122,880 rows), which doubled the CPU per appended span and left the file twice the size.
# At 128 MB a checkpoint covers a few whole row groups; what it costs is memory for the
# un-checkpointed rows and up to 128 MB of WAL to replay after a crash.
CHECKPOINT_THRESHOLD = "128MB"


class Commit:
    """Completion of one submitted batch: ``wait()`` returns once it is committed or failed."""

    __slots__ = ("_event", "error", "rows")

    def __init__(self, rows: int) -> None:
        self._event = threading.Event()
        self.error: StoreError | None = None
        self.rows = rows

    def wait(self, timeout: float | None = None) -> bool:
        """True when committed; False on timeout; raises the store error if the commit failed."""
        if not self._event.wait(timeout):
            return False
        if self.error is not None:
            raise self.error
        return True

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def _finish(self, error: StoreError | None = None) -> None:
        self.error = error
        self._event.set()


@dataclass
class WriterStats:
    submitted_rows: int = 0
    committed_rows: int = 0
    rejected_rows: int = 0
    failed_rows: int = 0
    commits: int = 0
    conflicts: int = 0  # lake commits that lost a race with another writer and were retried
    last_commit_ms: float = 0.0
    derive_passes: int = 0
    derive_held_passes: int = 0  # passes that read the spans this writer held (derived.Held)
    derive_ms: float = 0.0


class StoreWriter:
    def __init__(self, store, *, max_rows: int = DEFAULT_MAX_ROWS,
                 max_delay_ms: float = DEFAULT_MAX_DELAY_MS,
                 max_queued_rows: int = DEFAULT_MAX_QUEUED_ROWS,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._store = store
        self._con = store.new_cursor()
        # a lake has other writers: commits that lose a race to them are retried (lake.py)
        self._lake_author = store.writer_id if store.is_lake else None
        self._con.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
        self.max_rows = max_rows
        self.max_delay_s = max_delay_ms / 1000.0
        self.max_queued_rows = max_queued_rows
        self.max_bytes = max_bytes
        self._queue: deque[tuple[RowBatch, Commit, float, int]] = deque()
        self._queued_rows = 0
        self._queued_bytes = 0
        self._arriving: Callable[[], int] | None = None
        self._linger_s = 0.0
        self._cond = threading.Condition()
        self._closing = False
        self.closed = False
        self.stats = WriterStats()
        self._submitted_seq = 0
        self._committed_seq = 0  # every batch with seq <= this is committed or failed
        self._flush_seq = 0  # a flush waits for every batch with seq <= this: commit it now
        self._open_markers = self._con.execute("SELECT count(*) FROM open_spans").fetchall()[0][0]
        # a file's model rows are derived in passes after commits (derived.py); a lake reads
        # its views as before
        self._derives = not store.is_lake and derived.available(self._con)
        self._underived = 0  # rows committed since the last pass
        # ... and its spans and events as committed, which the next pass reads where they are
        self._held = derived.Held() if self._derives else None
        self._last_pass = time.monotonic()
        if self._lake_author is not None:
            # other writers add markers this one never counts: always look for ended ones
            self._open_markers = float("inf")
        # run_id -> (first, last) seen that this writer has committed to ``runs``: the stored
        # bounds cover these, so a commit inside them need not touch the row
        self._run_bounds: dict[str, tuple[int, int]] = {}
        # rows that name no run belong to the store's default run (rows.RUN_RULE)
        self._default_run_id = store.default_run_id
        self._thread = threading.Thread(target=self._run, name="rolloutscope-store-writer",
                                        daemon=True)
        self._thread.start()

    # -- producer side ---------------------------------------------------------------------
    def group_with(self, arriving: Callable[[], int], *,
                   linger_ms: float = DEFAULT_LINGER_MS) -> None:
        """Commit early once ``arriving()`` (batches on their way to ``submit``) has been 0
        for ``linger_ms``; call ``wake`` when it drops without a submit."""
        with self._cond:
            self._arriving = arriving
            self._linger_s = linger_ms / 1000.0

    def wake(self) -> None:
        """Have the writer look at ``arriving()`` again."""
        with self._cond:
            self._cond.notify_all()

    def submit(self, batch: RowBatch, *, block: bool = False,
               timeout: float | None = None, nbytes: int | None = None) -> Commit:
        """Queue a batch (``nbytes``: about what it holds, for ``max_bytes``). Raises
        ``QueueFullError`` when the queue is full and ``block`` is False (or still full after
        ``timeout``)."""
        commit = Commit(batch.rows)
        if nbytes is None:
            nbytes = batch.rows * ROW_BYTES_ESTIMATE
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if self._closing:
                raise StoreError("writer is closed")
            while self._queued_rows + batch.rows > self.max_queued_rows and self._queued_rows:
                if not block:
                    self.stats.rejected_rows += batch.rows
                    raise QueueFullError(batch.rows, self._queued_rows, self.max_queued_rows)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    self.stats.rejected_rows += batch.rows
                    raise QueueFullError(batch.rows, self._queued_rows, self.max_queued_rows)
                self._cond.wait(remaining)
            self._submitted_seq += 1
            self._queue.append((batch, commit, time.monotonic(), nbytes))
            self._queued_rows += batch.rows
            self._queued_bytes += nbytes
            self.stats.submitted_rows += batch.rows
            self._cond.notify_all()
        return commit

    def write(self, batch: RowBatch, timeout: float | None = None) -> None:
        """Submit and wait until committed (blocking while the queue is full)."""
        if not self.submit(batch, block=True, timeout=timeout).wait(timeout):
            raise StoreError("timed out waiting for the commit")

    @property
    def queued_rows(self) -> int:
        return self._queued_rows

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted before this call is committed (or has failed)."""
        with self._cond:
            target = self._submitted_seq
            self._flush_seq = max(self._flush_seq, target)
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self._committed_seq >= target, timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Commit everything queued, then stop the thread."""
        with self._cond:
            if self.closed:
                return
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        self.closed = True
        self._con.close()

    # -- writer thread ---------------------------------------------------------------------
    def _gather(self) -> list[tuple[RowBatch, Commit, float, int]] | None:
        """The next group to commit; [] when a derivation pass is due and nothing is queued;
        None once closing with nothing queued."""
        with self._cond:
            while not self._queue and not self._closing:
                if self._underived:
                    due = self._last_pass + derived.PASS_EVERY_S - time.monotonic()
                    if due <= 0:
                        return []
                    self._cond.wait(due)
                else:
                    self._cond.wait()
            if not self._queue:
                return None
            first_at = self._queue[0][2]
            idle_since: tuple[float, int] | None = None  # (when, queue length then)
            while (self._queued_rows < self.max_rows and self._queued_bytes < self.max_bytes
                   and not self._closing and self._flush_seq <= self._committed_seq):
                now = time.monotonic()
                remaining = first_at + self.max_delay_s - now
                if remaining <= 0:
                    break
                if self._arriving is not None:
                    if self._arriving() > 0:
                        idle_since = None
                    elif idle_since is None or idle_since[1] != len(self._queue):
                        idle_since = (now, len(self._queue))
                    elif now - idle_since[0] >= self._linger_s:
                        break  # nothing more is on its way: waiting would only add latency
                    if idle_since is not None:
                        remaining = min(remaining, idle_since[0] + self._linger_s - now)
                self._cond.wait(max(remaining, 0.0))
            taken: list[tuple[RowBatch, Commit, float, int]] = []
            rows = nbytes = 0
            while self._queue and ((rows < self.max_rows and nbytes < self.max_bytes)
                                   or not taken):
                item = self._queue.popleft()
                taken.append(item)
                rows += item[0].rows
                nbytes += item[3]
            self._queued_rows -= rows
            self._queued_bytes -= nbytes
            self._cond.notify_all()  # wake producers blocked on a full queue
            return taken

    def _run(self) -> None:
        while True:
            taken = self._gather()
            if taken is None:
                self._derive()
                return
            if not taken:
                self._derive()
                continue
            self._store.writer_alone()
            errors = self._commit_isolated([b for b, _, _, _ in taken])
            with self._cond:
                for (_, commit, _, _), error in zip(taken, errors, strict=True):
                    if error is None:
                        self.stats.committed_rows += commit.rows
                    else:
                        self.stats.failed_rows += commit.rows
                self._committed_seq += len(taken)
                self._cond.notify_all()
            for (_, commit, _, _), error in zip(taken, errors, strict=True):
                commit._finish(error)
            self._underived += sum(b.rows for b, _, _, _ in taken)
            if self._underived >= derived.PASS_AFTER_SPANS:
                # after the senders are answered: a pass never delays an acknowledgement
                self._derive()

    def _derive(self) -> None:
        """A derivation pass over what was committed since the last (derived.py). A failure
        is logged and retried at the next pass: the spans are stored, and readers compute the
        rows not derived yet from them (``rs_tail``)."""
        if not self._derives or not self._underived:
            return
        t0 = time.perf_counter()
        try:
            n = derived.derive(self._con, held=self._held)
        except duckdb.Error as exc:
            log.error("deriving the model rows failed (retried at the next pass): %s", exc)
            return
        finally:
            self._last_pass = time.monotonic()
        self._underived = 0
        if self._held is not None:
            self._held.clear()
            self.stats.derive_held_passes = self._held.passes
        self.stats.derive_passes += 1
        self.stats.derive_ms += (time.perf_counter() - t0) * 1000
        log.debug("derived the model rows of %d spans", n)

    def _commit_isolated(self, batches: list[RowBatch]) -> list[StoreError | None]:
        """Commit ``batches`` together; if that fails, each alone, so that a batch that cannot
        be stored fails only its own submitter. One error (or None) per batch."""
        error = self._try_commit(batches)
        if error is None:
            return [None] * len(batches)
        if len(batches) == 1:
            log.error("store commit of 1 batch failed: %s", error)
            return [error]
        log.warning("group commit of %d batches failed (%s); committing each on its own",
                    len(batches), error)
        errors = [self._try_commit([b]) for b in batches]
        failed = sum(e is not None for e in errors)
        if failed:
            log.error("store commit failed for %d of %d batches: %s", failed, len(batches),
                      next(e for e in errors if e is not None))
        return errors

    def _try_commit(self, batches: list[RowBatch]) -> StoreError | None:
        for attempt in range(LAKE_COMMIT_ATTEMPTS if self._lake_author else 1):
            try:
                self._commit(batches)
            except Exception as exc:  # noqa: BLE001 - reported to the waiters, never raised
                try:
                    self._con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                if self._lake_author is not None and lake.as_conflict(exc) is not None:
                    self.stats.conflicts += 1
                    time.sleep(min(0.25, 0.002 * 1.5 ** min(attempt, 14)))
                    continue
                return _as_store_error(exc)
            self.stats.commits += 1
            return None
        return lake.CommitConflictError(f"lost {LAKE_COMMIT_ATTEMPTS} commit races in a row")

    def _commit(self, batches: list[RowBatch]) -> None:
        t0 = time.perf_counter()
        merged = batches[0]
        if len(batches) > 1:
            merged = RowBatch()
            for b in batches:
                merged.extend(b)
        con = self._con
        seen: dict[str, tuple[int, int]] = {}
        markers = self._open_markers
        held: list[tuple[str, pa.Table]] = []
        con.execute("BEGIN")
        if self._lake_author is not None:
            lake.stamp_commit(con, self._lake_author, f"{merged.rows} rows")
        for table in _COMMIT_ORDER:
            # converted and inserted a slice at a time: the Arrow copy of a large batch never
            # exists whole beside its rows
            for arrow in merged.arrow_slices(table, ARROW_SLICE_ROWS,
                                             default_run_id=self._default_run_id):
                if table == "spans" and markers:
                    markers -= self._delete_markers_of(arrow)
                # a relation over the table's Arrow C stream: no named registration to create
                # and drop, and DuckDB reads the stream itself, where for a pyarrow Table it
                # builds a pyarrow.dataset scanner per insert (0.5 ms of a commit's ~2 ms of
                # fixed cost; bench_collector.py measures the whole)
                con.from_arrow(arrow.__arrow_c_stream__()).insert_into(table)
                if self._held is not None:
                    held.append((table, arrow))
                if table == "open_spans":
                    markers += arrow.num_rows
                if table in ("spans", "open_spans"):
                    for run_id, (first, last) in _run_bounds(arrow).items():
                        known = seen.get(run_id)
                        seen[run_id] = (first, last) if known is None else (
                            min(first, known[0]), max(last, known[1]))
        self._record_run_bounds(seen)
        con.execute("COMMIT")
        # only now: a rolled-back commit changed neither the markers nor the bounds
        self._open_markers = markers
        self._run_bounds.update(seen)
        for table, arrow in held:
            self._held.add(table, arrow)
        self.stats.last_commit_ms = (time.perf_counter() - t0) * 1000

    def _delete_markers_of(self, spans: pa.Table) -> int:
        """Drop the start markers of spans that ended; returns how many there were. A marker
        is its own run's: two runs of one seed in one file (a capture and its replay) share
        span ids, and one must not close the other's open intervals."""
        con = self._con
        con.register("_rs_ended", spans)
        try:
            deleted = con.execute(
                "DELETE FROM open_spans o USING _rs_ended b "
                "WHERE o.span_id = b.span_id AND o.trace_id = b.trace_id "
                "AND o.run_id IS NOT DISTINCT FROM b.run_id").fetchall()
        finally:
            con.unregister("_rs_ended")
        return deleted[0][0] if deleted else 0

    def _record_run_bounds(self, seen: dict[str, tuple[int, int]]) -> None:
        """Widen each run's first/last seen to cover this commit.

        A run whose bounds this writer already wrote and that the commit does not widen costs
        nothing; a known run costs a keyed UPDATE; only a run new to this writer pays for the
        upsert (it may exist already, registered or written by an earlier session)."""
        con = self._con
        if self._lake_author is not None:
            widened = {run_id: bounds for run_id, bounds in seen.items()
                       if (known := self._run_bounds.get(run_id)) is None
                       or bounds[0] < known[0] or bounds[1] > known[1]}
            lake.record_run_bounds(con, widened, self._lake_author)
            for run_id, known in self._run_bounds.items():
                if run_id in seen:
                    seen[run_id] = (min(seen[run_id][0], known[0]),
                                    max(seen[run_id][1], known[1]))
            return
        for run_id, (first, last) in seen.items():
            known = self._run_bounds.get(run_id)
            if known is None:
                con.execute(
                    """INSERT INTO runs (run_id, source, first_seen_ns, last_seen_ns)
                       VALUES (?, 'live', ?, ?)
                       ON CONFLICT (run_id) DO UPDATE SET
                         first_seen_ns = least(coalesce(runs.first_seen_ns,
                                                        excluded.first_seen_ns),
                                               excluded.first_seen_ns),
                         last_seen_ns = greatest(coalesce(runs.last_seen_ns,
                                                          excluded.last_seen_ns),
                                                 excluded.last_seen_ns)""",
                    [run_id, first, last])
            elif first < known[0] or last > known[1]:
                con.execute(
                    """UPDATE runs SET first_seen_ns = least(first_seen_ns, $first),
                                       last_seen_ns = greatest(last_seen_ns, $last)
                       WHERE run_id = $run_id""",
                    {"run_id": run_id, "first": first, "last": last})
            else:
                continue
            if known is not None:
                seen[run_id] = (min(first, known[0]), max(last, known[1]))


def _run_bounds(rows: pa.Table) -> dict[str, tuple[int, int]]:
    """run_id -> (earliest start, latest end or start) of a spans / open_spans table, in Arrow
    compute: one run per batch is the rule, so that case skips the group-by."""
    run_ids = rows.column("run_id")
    starts = rows.column("start_ns")
    ends = pc.coalesce(rows.column("end_ns"), starts)
    if run_ids.null_count == 0:
        unique = pc.unique(run_ids)
        if len(unique) == 1:
            return {unique[0].as_py(): (pc.min(starts).as_py(), pc.max(ends).as_py())}
    grouped = pa.table({"run_id": run_ids, "first": starts, "last": ends}).group_by(
        "run_id").aggregate([("first", "min"), ("last", "max")])
    return {run_id: (first, last) for run_id, first, last in zip(
        grouped.column("run_id").to_pylist(), grouped.column("first_min").to_pylist(),
        grouped.column("last_max").to_pylist(), strict=True) if run_id is not None}


# Start markers go in before finished spans: when a marker and its span's end arrive in the same
# commit, the span's insert must find the marker to delete it, or a finished interval would stay
# "open" beside its closed row.
_COMMIT_ORDER = ("open_spans", *(t for t in BATCH_TABLES if t != "open_spans"))


# What a batch that got past RowBatch's checks may still fail with because of its values: the
# Arrow conversion of a column, or DuckDB's cast of one. Any other failure is the store's.
_DATA_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError,
                UnicodeError, duckdb.ConversionException, duckdb.OutOfRangeException,
                duckdb.ConstraintException)


def _as_store_error(exc: Exception) -> StoreError:
    if isinstance(exc, _DATA_ERRORS):
        return UnstorableBatchError(f"{type(exc).__name__}: {exc}")
    try:
        return translate(exc)
    except Exception:  # noqa: BLE001 - not a DuckDB error: a bug, still reported as data
        return StoreError(f"{type(exc).__name__}: {exc}")
