"""``RunStore.query_frame`` reads what ``query_df`` reads, value for value and with the same
dtypes, but for text, which it holds as Arrow strings (``TEXT``): on every view the dashboard
reads, over the real Gym 0.7.0 capture posted to a collector and over a synthetic run, and on a
result holding each kind of DuckDB column with and without NULLs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rolloutscope.dashboard.datastore import VIEWS
from rolloutscope.store import RunStore
from rolloutscope.store.store import TEXT
from tests.gym_capture import collect_capture
from tests.synthetic_run import synthetic_run



def _same(got: pd.DataFrame, want: pd.DataFrame, where: str) -> None:
    assert list(got.columns) == list(want.columns), where
    assert len(got) == len(want), where
    for col in want.columns:
        if want[col].dtype == object and got[col].dtype == TEXT:
            # text: the same values, missing where they were
            assert got[col].isna().tolist() == want[col].isna().tolist(), (where, col)
            assert got[col].dropna().tolist() == want[col].dropna().tolist(), (where, col)
            continue
        assert got[col].dtype == want[col].dtype, (where, col, got[col].dtype, want[col].dtype)
        pd.testing.assert_series_equal(got[col], want[col], obj=f"{where}.{col}")


def _views_read_alike(path: Path) -> int:
    texts = 0
    with RunStore(path, read_only=True) as store:
        present = {r[0] for r in store.query("SELECT view_name FROM duckdb_views()")}
        for run in store.run_ids():
            for spec in VIEWS.values():
                if spec.name not in present:
                    continue
                sql = f"SELECT * FROM {spec.name} WHERE run_id = ? ORDER BY ALL"
                got, want = store.query_frame(sql, [run]), store.query_df(sql, [run])
                _same(got, want, spec.name)
                texts += sum(got[c].dtype == TEXT for c in got.columns if got[c].notna().any())
                empty = f"SELECT * FROM {spec.name} LIMIT 0"
                _same(store.query_frame(empty), store.query_df(empty), spec.name + " (empty)")
    return texts


def test_the_views_read_alike_on_the_real_gym_capture(tmp_path):
    assert _views_read_alike(collect_capture(tmp_path / "gym.duckdb")) > 20


@pytest.fixture(scope="module")
def synthetic_path(tmp_path_factory) -> Path:
    return synthetic_run(tmp_path_factory.mktemp("frame") / "synthetic.duckdb", spans=20_000)


def test_the_views_read_alike_on_a_synthetic_run(synthetic_path):
    assert _views_read_alike(synthetic_path) > 40


KINDS = """
    1::BIGINT AS i, {null}::BIGINT AS i_null, 1::INTEGER AS i32, {null}::INTEGER AS i32_null,
    2::UBIGINT AS u, true AS b, {null}::BOOLEAN AS b_null, 1.5::DOUBLE AS d,
    {null}::DOUBLE AS d_null, 'x' AS t, {null}::VARCHAR AS t_null, sum(1::BIGINT) AS huge,
    1.25::DECIMAL(10, 2) AS dec, [1, 2] AS l, ['a', NULL] AS lt, {{'k': 1}} AS st,
    map(['k'], [2]) AS m, TIMESTAMP '2026-01-02 03:04:05.123456' AS ts,
    TIMESTAMPTZ '2026-01-02 03:04:05+00' AS tstz, '{{"a": 1}}'::JSON AS j
"""


@pytest.mark.parametrize("null", ["NULL", "1"], ids=["with-nulls", "without"])
def test_each_kind_of_column_reads_as_query_df_reads_it(tmp_path, null):
    with RunStore(tmp_path / "kinds.duckdb") as store:
        value = "CASE WHEN n = 0 THEN NULL ELSE 1 END" if null == "NULL" else "1"
        sql = f"SELECT {KINDS.format(null=value)} FROM range(2) r(n) GROUP BY n ORDER BY n"
        got, want = store.query_frame(sql), store.query_df(sql)
        _same(got, want, "kinds")
        assert got.t.dtype == TEXT and got.j.dtype == TEXT
        if null == "NULL":
            assert got.i_null.dtype == pd.Int64Dtype() and got.b_null.dtype == pd.BooleanDtype()
            assert np.isnan(got.t_null[0]) and got.t_null[1] == "1"


def test_a_small_result_holds_buffers_of_its_own_size(tmp_path):
    """DuckDB allocates each Arrow batch's buffers for all its rows: a 10-row frame holding
    them kept megabytes of address space per column (a test process that kept a few hundred
    frames could no longer fork). A large result's buffers are its batches'."""
    from rolloutscope.store.store import ARROW_BATCH_ROWS

    with RunStore(tmp_path / "sizes.duckdb") as store:
        for rows in (10, ARROW_BATCH_ROWS + 10):
            df = store.query_frame(f"SELECT n, 'id-' || n AS t FROM range({rows}) r(n)")
            text = df.t.array._pa_array
            held = sum(b.size for chunk in text.chunks for b in chunk.buffers() if b is not None)
            assert held >= 4 * rows
            if rows < ARROW_BATCH_ROWS:
                assert held < 64 * rows + 4096, held
            assert df.t.iloc[-1] == f"id-{rows - 1}"
