"""DataFrames of query results (``RunStore.query_frame``): pandas loads with this module, so a
command that reads a store without frames (``rolloutscope info``) never imports it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

# text columns of ``query_frame``: pandas' Arrow-backed strings with NaN for missing values (the
# dtype pandas 3 makes its default), so a missing value reads as object columns' did
TEXT = pd.StringDtype("pyarrow", na_value=np.nan)
# integer and boolean columns holding a NULL: pandas' nullable dtypes, as DuckDB's ``df()``
_NULLABLE = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
             pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
             pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(),
             pa.bool_(): pd.BooleanDtype()}


def as_text(values: pd.Series) -> pd.Series:
    """``values`` as text: a text column as it is (``TEXT``, ``query_frame``'s Arrow
    strings: ``astype(str)`` would make a Python string of each of its 809k ids at 10M spans,
    0.12 s), anything else through ``astype(str)``."""
    return values if values.dtype == TEXT else values.astype(str)


def arrow_frame(table: pa.Table) -> pd.DataFrame:
    """An Arrow result as the DataFrame DuckDB's ``df()`` makes, but for text columns, which
    are ``TEXT`` (Arrow-backed) instead of Python objects: integers and booleans holding a NULL
    nullable, decimals (DuckDB's sums of integers) float64, lists numpy arrays, structs and
    maps dicts, timestamps as they are."""
    columns = {}
    for name, col in zip(table.column_names, table.columns):
        kind = col.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            columns[name] = col.to_pandas(types_mapper={kind: TEXT}.get)
        elif kind in _NULLABLE and col.null_count:
            columns[name] = col.to_pandas(types_mapper={kind: _NULLABLE[kind]}.get)
        elif pa.types.is_decimal(kind):
            columns[name] = col.cast(pa.float64()).to_pandas()
        else:
            columns[name] = col.to_pandas(maps_as_pydicts="strict")
    return pd.DataFrame(columns, index=pd.RangeIndex(table.num_rows))
