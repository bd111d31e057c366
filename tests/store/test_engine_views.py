"""engine_state and the engine incidents over a run written by hand (tests/engine_metrics.py):
three engines' scrapes through the scraper's own ``points``, behind three shards fleet health
calls healthy, on a DuckDB file and on a lake."""

from __future__ import annotations

import pandas as pd
import pytest

from rolloutscope.store import RowBatch, RunStore
from tests.engine_metrics import READS, write_engine_run
from tests.store.conftest import S, T0

RUN = "run-1"


@pytest.fixture
def written(kit, store_path):
    write_engine_run(kit, RUN, t0_ns=T0)
    kit.inst.shutdown()
    with RunStore(store_path, read_only=True) as store:
        yield store


def _frame(store, sql):
    return store.query_df(sql)


class TestEngineState:
    def test_one_row_per_engine_and_scrape_with_deltas_from_the_second_on(self, written):
        st = _frame(written, "SELECT * FROM engine_state ORDER BY engine, ts_ns")
        assert st.groupby("engine").size().to_dict() == {
            f"engine 10.0.0.{i}:8000 #0": READS for i in (7, 8, 9)}
        first = st.groupby("engine").head(1)
        assert first[["dt_s", "preemptions_delta", "finished_delta", "queue_share"]] \
            .isna().all().all()
        sat = st[st.address == "10.0.0.9:8000"].iloc[1:]
        assert (sat.dt_s == 0.5).all() and (sat.preemption_rate == 2.0).all()
        assert (sat.queue_share.round(6) == 0.8).all() and (sat.finished_delta == 2).all()
        assert list(sat.waiting) == list(range(2, READS + 1))
        assert set(st.model_name) == {"Qwen/Qwen3-0.6B"} and set(st.engine_idx) == {"0"}

    def test_a_restarted_engine_counts_its_counters_from_zero_again(self, kit, store_path):
        from rolloutscope.collectors.scrape import engine_target, points
        from tests.engine_metrics import EngineModel, healthy

        kit.inst.store.register_run(RUN)
        target = engine_target("http://10.0.0.7:8000/metrics")
        batch = RowBatch()
        for i, model in enumerate((EngineModel(healthy), EngineModel(healthy))):
            for k in range(3):  # a new process (its counters from zero) after three reads
                batch.extend(points(model.step().decode(), target=target, run_id=RUN,
                                    ts_ns=T0 + (3 * i + k) * S))
        kit.inst.store.writer().write(batch, timeout=120)
        kit.inst.shutdown()
        with RunStore(store_path, read_only=True) as store:
            st = _frame(store, "SELECT finished, finished_delta FROM engine_state ORDER BY ts_ns")
        assert list(st.finished) == [2, 4, 6, 2, 4, 6]
        assert list(st.finished_delta.fillna(-1)) == [-1, 2, 2, 2, 2, 2]


class TestEngineIncidents:
    def test_each_engine_pattern_is_found_once_and_the_engine_that_keeps_up_never(self,
                                                                               written):
        inc = _frame(written, "SELECT * FROM incidents WHERE kind LIKE 'engine%' ORDER BY kind")
        assert dict(zip(inc.kind, inc.subject, strict=True)) == {
            "engine_backlog_while_healthy": "shard 2",
            "engine_saturated": "engine 10.0.0.9:8000 #0",
            "engine_wedged": "engine 10.0.0.8:8000 #0"}
        assert not inc.summary.str.contains("10.0.0.7").any()

    def test_the_wedged_engine_from_its_last_finish_while_fleet_health_called_it_healthy(
            self, written):
        (row,) = _frame(written, "SELECT * FROM engine_wedged").itertuples()
        # three reads finishing, the last at 11 s; stuck from the fourth read on, still at the end
        assert row.start_ns == T0 + 11 * S and pd.isna(row.end_ns)
        assert "finished none for 4 s from 11.0 s" in row.summary
        assert "fleet health meanwhile: shard 1 healthy" in row.summary
        shard = _frame(written, "SELECT span_id FROM shard_states WHERE shard_idx = 1")
        assert list(row.evidence) == list(shard.span_id)

    def test_saturation_is_queue_time_over_the_window_and_the_backlog_overlaps_healthy(
            self, written):
        (sat,) = _frame(written, "SELECT * FROM engine_saturated").itertuples()
        assert sat.start_ns == T0 + 10 * S  # the first full window's start
        assert "80-80%" in sat.summary and "over 1 s windows" in sat.summary
        (back,) = _frame(written, "SELECT * FROM engine_backlog_while_healthy").itertuples()
        assert back.start_ns == T0 + 10 * S and back.end_ns == T0 + 10 * S + (READS - 1) * S // 2
        assert "grow from 1 to 12 over 6 s" in back.summary

    def test_the_run_thresholds_decide(self, kit, store_path):
        write_engine_run(kit, RUN, t0_ns=T0)
        kit.inst.store.register_run(RUN, config={
            "engine_wedged_s": 30.0, "engine_backlog_s": 30.0,
            "engine_saturated_queue_share": 0.9})
        kit.inst.shutdown()
        with RunStore(store_path, read_only=True) as store:
            assert _frame(store, "SELECT * FROM incidents WHERE kind LIKE 'engine%'").empty
            t = _frame(store, "SELECT * FROM run_thresholds")
        assert t.engine_saturation_window_s.iloc[0] == 60.0  # the default where none is given
