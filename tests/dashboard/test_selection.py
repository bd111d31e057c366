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
