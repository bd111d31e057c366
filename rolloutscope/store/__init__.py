"""The run store: one DuckDB file per run, its tables, writer and views.

The names below load on first use (PEP 562): a command that needs only the store's errors or
a lake's name (``rolloutscope.store.lake``, ``.errors``) does not import pandas and Arrow for
``RunStore``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "MissingRelationError": "errors", "NotARunStoreError": "errors",
    "QueueFullError": "errors", "ReadOnlyStoreError": "errors",
    "SchemaVersionError": "errors", "StoreBusyError": "errors", "StoreError": "errors",
    "TransientStoreError": "errors", "RowBatch": "rows", "SCHEMA_VERSION": "schema",
    "RunStore": "store", "open_store": "store", "resolve_path": "store",
}

__all__ = [
    "SCHEMA_VERSION", "MissingRelationError", "NotARunStoreError", "QueueFullError",
    "ReadOnlyStoreError", "RowBatch", "RunStore", "SchemaVersionError", "StoreBusyError",
    "StoreError", "TransientStoreError", "open_store", "resolve_path",
]
assert set(__all__) == set(_WHERE)

if TYPE_CHECKING:
    from rolloutscope.store.errors import (  # noqa: F401
        MissingRelationError,
        NotARunStoreError,
        QueueFullError,
        ReadOnlyStoreError,
        SchemaVersionError,
        StoreBusyError,
        StoreError,
        TransientStoreError,
    )
    from rolloutscope.store.rows import RowBatch  # noqa: F401
    from rolloutscope.store.schema import SCHEMA_VERSION  # noqa: F401
    from rolloutscope.store.store import RunStore, open_store, resolve_path  # noqa: F401


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rolloutscope.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rolloutscope.store.{module}"), name)
    globals()[name] = value
    return value
