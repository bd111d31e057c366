"""The run store: one DuckDB file per run, its tables, writer and views."""

from rolloutscope.store.errors import (
    MissingRelationError,
    NotARunStoreError,
    QueueFullError,
    ReadOnlyStoreError,
    SchemaVersionError,
    StoreBusyError,
    StoreError,
    TransientStoreError,
)
from rolloutscope.store.rows import RowBatch
from rolloutscope.store.schema import SCHEMA_VERSION
from rolloutscope.store.store import RunStore, open_store, resolve_path

__all__ = [
    "SCHEMA_VERSION", "MissingRelationError", "NotARunStoreError", "QueueFullError",
    "ReadOnlyStoreError", "RowBatch", "RunStore", "SchemaVersionError", "StoreBusyError",
    "StoreError", "TransientStoreError", "open_store", "resolve_path",
]
