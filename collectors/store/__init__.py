"""The run store: one DuckDB file per run, its tables, writer and views."""

from rolloutscope.collectors.store.errors import (
    MissingRelationError,
    NotARunStoreError,
    QueueFullError,
    ReadOnlyStoreError,
    SchemaVersionError,
    StoreBusyError,
    StoreError,
    TransientStoreError,
)
from rolloutscope.collectors.store.rows import RowBatch
from rolloutscope.collectors.store.schema import SCHEMA_VERSION
from rolloutscope.collectors.store.store import RunStore, open_store, resolve_path

__all__ = [
    "SCHEMA_VERSION", "MissingRelationError", "NotARunStoreError", "QueueFullError",
    "ReadOnlyStoreError", "RowBatch", "RunStore", "SchemaVersionError", "StoreBusyError",
    "StoreError", "TransientStoreError", "open_store", "resolve_path",
]
