"""The store's error taxonomy, and the one place DuckDB's errors are translated into it."""

from __future__ import annotations

import duckdb

from rolloutscope.errors import InputError


class StoreError(Exception):
    """Base class of every error the run store raises."""


class UnknownRunError(StoreError, InputError):
    """A run id that the store does not hold."""

    def __init__(self, path: str, run_id: str, known: list[str]) -> None:
        self.path = path
        self.run_id = run_id
        super().__init__(f"{path} holds no run {run_id!r}; runs: {', '.join(known) or 'none'}")


class NotARunStoreError(StoreError):
    """The file exists but was not written by rolloutscope."""

    def __init__(self, path: str, detail: str = "") -> None:
        self.path = path
        super().__init__(f"{path} is not a rolloutscope run store{': ' + detail if detail else ''}")


class SchemaVersionError(StoreError):
    """The file was written by a newer rolloutscope than this one."""

    def __init__(self, path: str, found: int, supported: int) -> None:
        self.path, self.found, self.supported = path, found, supported
        super().__init__(
            f"{path} has run-store schema version {found}; this rolloutscope reads versions up to "
            f"{supported}. Upgrade rolloutscope to open it.")


class StoreBusyError(StoreError):
    """Another process holds the file open for writing (DuckDB allows one writer process)."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        super().__init__(
            f"{path} is open for writing in another process; query it through that process's "
            f"collector (rolloutscope serve) or wait until it closes. ({detail})")


class MissingRelationError(StoreError):
    """A table or view that the caller named does not exist."""


class TransientStoreError(StoreError):
    """An I/O or resource failure that may succeed if retried."""


class ReadOnlyStoreError(StoreError):
    """A write was attempted on a store opened read-only."""


class UnstorableBatchError(StoreError):
    """A batch whose values the store cannot hold (it bypassed ``RowBatch``'s checks, or a
    check missed something): the submitter's fault, and only the submitter's."""


class QueueFullError(StoreError):
    """The writer's bounded queue cannot take the batch now (backpressure)."""

    def __init__(self, rows: int, queued: int, limit: int) -> None:
        self.rows, self.queued, self.limit = rows, queued, limit
        super().__init__(f"writer queue full: {queued} rows queued, limit {limit}; "
                         f"batch of {rows} rows not accepted")


def translate(exc: BaseException, *, path: str = "") -> StoreError:
    """Map a DuckDB exception onto the taxonomy. Classified by type, never by name strings."""
    if isinstance(exc, StoreError):
        return exc
    msg = str(exc)
    if isinstance(exc, duckdb.IOException):
        if "lock" in msg.lower():
            return StoreBusyError(path, msg)
        return TransientStoreError(msg)
    if isinstance(exc, duckdb.CatalogException):
        return MissingRelationError(msg)
    if isinstance(exc, duckdb.OutOfMemoryException):
        return TransientStoreError(msg)
    if isinstance(exc, duckdb.InvalidInputException) and "read-only" in msg:
        return ReadOnlyStoreError(msg)
    if isinstance(exc, duckdb.Error):
        return StoreError(msg)
    raise exc
