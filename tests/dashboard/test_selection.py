"""The row selections over Arrow-backed frames give what pandas gives, on frames read the way
the DataStore reads them: text as Arrow strings in several chunks, nullable integers, NULLs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from rolloutscope.dashboard.selection import is_in, rows_where
from rolloutscope.store.store import TEXT, arrow_frame


def chunked_frame(rng: np.random.Generator, n: int) -> pd.DataFrame:
    ids = [None if rng.random() < 0.1 else f"r-{int(v)}" for v in rng.integers(0, 40, n)]
    prompts = [None if rng.random() < 0.1 else int(v) for v in rng.integers(0, 40, n)]
    table = pa.table({"rollout_id": pa.array(ids, pa.string()),
                      "prompt_idx": pa.array(prompts, pa.int64()),
                      "start_ns": pa.array(rng.integers(0, 10**12, n), pa.int64()),
                      "outcome": pa.array(rng.choice(["open", "failed"], n), pa.string())})
    # several record batches: the chunks the store's reader hands over
    table = pa.Table.from_batches(table.to_batches(max_chunksize=max(n // 5, 1)))
    return arrow_frame(table)


@pytest.mark.parametrize("seed", range(6))
def test_is_in_and_rows_where_give_what_pandas_gives(seed):
    rng = np.random.default_rng(seed)
    df = chunked_frame(rng, int(rng.integers(1, 300)))
    df.index = df.index * 3 + 7  # an index of its own, kept
    assert df.rollout_id.dtype == TEXT and df.rollout_id.array.__arrow_array__().num_chunks > 1
    wanted = {f"r-{int(v)}" for v in rng.integers(0, 60, int(rng.integers(0, 12)))}
    for column, values in (("rollout_id", wanted), ("rollout_id", list(wanted) + [None]),
                           ("prompt_idx", set(rng.integers(0, 40, 5).tolist()))):
        mask = is_in(df[column], values)
        assert mask.dtype == bool
        assert mask.tolist() == df[column].isin(values).fillna(False).tolist(), column
        got, want = rows_where(df, mask), df[mask]
        pd.testing.assert_frame_equal(got, want)


def test_object_text_columns_select_as_pandas_does():
    df = pd.DataFrame({"rollout_id": ["a", None, "b"], "n": [1.0, 2.0, 3.0]})
    mask = is_in(df.rollout_id, {"b", "a"})
    assert mask.tolist() == [True, False, True]
    pd.testing.assert_frame_equal(rows_where(df, mask), df[mask])


@pytest.mark.parametrize("seed", range(6))
def test_integer_columns_select_as_pandas_does_whatever_is_wanted(seed):
    """A prompt index column (nullable or not) looked up through a table of the wanted
    integers matches pandas, and wanted values no integer equals (2.5, text, a missing value,
    one past int64) are compared as pandas compares them."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    nullable = pd.Series(pd.array(rng.integers(-5, 60, n), dtype="Int64"))
    nullable[rng.random(n) < 0.2] = pd.NA
    for values in (nullable, pd.Series(rng.integers(-5, 60, n)), chunked_frame(rng, n).prompt_idx):
        some = [int(v) for v in rng.integers(-8, 70, int(rng.integers(1, 12)))]
        for wanted in (some, set(some), [float(v) for v in some], some + [2.5], some + [None],
                       some + [np.nan], [str(v) for v in some], some + [10**20], [10**12]):
            got = is_in(values, wanted)
            assert got.dtype == bool
            assert got.tolist() == values.isin(wanted).fillna(False).tolist(), wanted


def test_dropping_a_few_rows_keeps_the_other_chunks_as_they_are():
    """A live refresh drops the rows it replaces from frames of hundreds of thousands of rows:
    the chunks holding none of them come through uncopied, and the rows are pandas' own."""
    rng = np.random.default_rng(3)
    df = chunked_frame(rng, 250)
    chunks = df.rollout_id.array.__arrow_array__().chunks
    mask = np.ones(len(df), dtype=bool)
    mask[[3, 7]] = False  # both in the first chunk
    got = rows_where(df, mask)
    pd.testing.assert_frame_equal(got, df[mask])
    kept = got.rollout_id.array.__arrow_array__().chunks
    assert len(kept) == len(chunks)
    assert all(a.buffers()[2].address == b.buffers()[2].address
               for a, b in zip(kept[1:], chunks[1:]))
    assert kept[0].buffers()[2].address != chunks[0].buffers()[2].address
