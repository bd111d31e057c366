"""Row selections over the DataStore's frames, whose text columns are Arrow strings
(``RunStore.query_frame``) in chunks of 65,536 rows: the two that pandas makes slow there.

At 10M spans a first render selects rows of 0.4-0.8M-row frames a dozen times (the rollouts the
incidents name, the rows of the drawn lanes, an incident's evidence); each helper here is what
pandas does, without its per-value or per-chunk overhead.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from rolloutscope.store.store import TEXT


def is_in(values: pd.Series, wanted: Iterable) -> np.ndarray:
    """``values.isin(wanted)`` as a boolean array. A text column (Arrow strings) is looked up
    by Arrow directly: pandas first makes an Arrow scalar of every wanted value, one at a time,
    which for the thousands of span ids the incidents name took 0.11 s of a first render at
    10M spans, more than the lookups themselves."""
    if values.dtype != TEXT:
        wanted = wanted if isinstance(wanted, (set, frozenset, list)) else list(wanted)
        ints = _integer_keys(values, wanted)
        if ints is not None:
            return ints
        return values.isin(wanted).to_numpy(dtype=bool)
    chunks = values.array.__arrow_array__()
    # a missing value wanted matches the missing values, as in pandas
    keys = pa.array([v if isinstance(v, str) else None if pd.isna(v) else str(v)
                     for v in wanted], type=chunks.type)
    return pc.is_in(chunks, value_set=keys).to_numpy(zero_copy_only=False).astype(bool)


def _integer_keys(values: pd.Series, wanted) -> np.ndarray | None:
    """``is_in`` of an integer column (a prompt index) through ``integer_lookup``; None where
    that does not apply (not an integer column)."""
    if not pd.api.types.is_integer_dtype(values.dtype) or not len(values):
        return None
    return integer_lookup(integers(values), wanted)


def integers(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as int64 values and a mask of the missing ones (their value 0): what
    ``integer_lookup`` reads, made once for a column looked up often."""
    missing = values.isna().to_numpy(dtype=bool)
    return values.to_numpy(dtype="int64", na_value=0), missing


def integer_lookup(column: tuple[np.ndarray, np.ndarray], wanted) -> np.ndarray | None:
    """Which values of an integer ``column`` (``integers``) are among ``wanted``, for wanted
    integers spanning a range no wider than a few times the column: a lookup table, not a hash
    of every value (pandas' ``isin`` of a nullable integer column, ~12 ms over the 809k tries of
    a 10M-span run, is ~4 ms this way). None where that does not apply: a range too wide, or a
    wanted value no integer equals (2.5, text, a missing value), compared as pandas does."""
    ints, missing = column
    items = list(wanted)
    if not items:
        return np.zeros(len(ints), dtype=bool)
    if not all(isinstance(v, (int, float, np.integer, np.floating)) for v in items):
        return None
    try:
        keys = np.unique(np.asarray(items, dtype="int64"))
    except (ValueError, OverflowError):  # NaN, or past int64
        return None
    if not np.array_equal(keys, np.unique(np.asarray(items, dtype="float64"))):
        return None  # 2.5 is not 2
    lo, hi = int(keys[0]), int(keys[-1])
    if hi - lo > 4 * len(ints):
        return None
    table = np.zeros(hi - lo + 1, dtype=bool)
    table[keys - lo] = True
    at = ints - lo
    inside = (at >= 0) & (at <= hi - lo) & ~missing
    out = np.zeros(len(ints), dtype=bool)
    out[inside] = table[at[inside]]
    return out


def rows_where(df: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """``df[mask]``, its index kept. Text columns (Arrow strings in chunks of 65,536 rows) take
    their rows chunk by chunk: pandas takes the rows of each through one ``take`` that first
    joins the chunks, ~2 ms a column at 809k tries, so a few rows of the tries cost ~20 ms; a
    ``take`` of one chunk's rows is ~7 us for a few rows (a chunk ``filter`` by a mask reads
    the whole chunk, 2-4 times as long). A chunk whose rows are all kept is kept as it is and
    one with none is left out, so dropping a few replaced rows from a live frame copies only
    the chunks they were in (filtering every chunk of the four large frames took most of a
    10M-span tick's second)."""
    at = np.flatnonzero(np.asarray(mask, dtype=bool))
    plans: dict[tuple[int, ...], list] = {}  # chunk lengths -> what to keep of each chunk
    columns = {}
    for c, col in df.items():
        if col.dtype != TEXT:
            columns[c] = col.array[at]
            continue
        chunks = col.array.__arrow_array__()
        lengths = tuple(len(chunk) for chunk in chunks.chunks)
        if lengths not in plans:
            plans[lengths] = _chunk_plan(at, lengths)
        kept = [chunks.chunk(i) if rows is None else chunks.chunk(i).take(rows)
                for i, rows in plans[lengths]]
        columns[c] = pd.array(pa.chunked_array(kept, type=chunks.type), dtype=TEXT)
    return pd.DataFrame(columns, index=df.index[at])


def _chunk_plan(at: np.ndarray, lengths: tuple[int, ...]) -> list[tuple[int, pa.Array | None]]:
    """The chunks that keep rows of the sorted positions ``at``: (chunk, its rows to take, or
    None where it keeps every row)."""
    starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    bounds = np.searchsorted(at, starts)  # at[bounds[i]:bounds[i + 1]] lie in chunk i
    plan = []
    for i, n in enumerate(lengths):
        lo, hi = bounds[i], bounds[i + 1]
        if hi > lo:
            plan.append((i, None if hi - lo == n else pa.array(at[lo:hi] - starts[i])))
    return plan
