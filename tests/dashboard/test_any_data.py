"""The DataStore and the trace waterfall on data that is not rolloutscope's own, headless: the
frames' columns when a store holds nothing, the first run arriving live, and the waterfall's
rows as data."""

from __future__ import annotations

import pandas as pd
import panel as pn

from rolloutscope.collectors.exporter import instrument
from rolloutscope.dashboard import trace_plot as tp
from rolloutscope.dashboard.app import build_app
from rolloutscope.dashboard.datastore import VIEWS, DataStore
from rolloutscope.store import RunStore
from tests.store.conftest import SpanKit


def test_every_frame_of_an_empty_store_has_its_views_columns(tmp_path):
    with RunStore(tmp_path / "empty.duckdb") as store:
        data = DataStore(store)
        assert data.run_id is None and data.state() == "no_runs"
        for name in VIEWS:
            expected = list(store.query_df(f"SELECT * FROM {name} LIMIT 0").columns)
            assert list(data.frames[name].columns) == expected, name
        # every reader of the frames works on them
        assert data.indicators()["incidents"] == 0 and data.rollout_lanes() == ([], 0)
        assert data.attempts_table().empty and data.trace_choices().empty
        app = build_app(store, live=False)
        for view in app.dashboard.views():
            view.shown = True
            assert pn.panel(view).get_root() is not None


def test_live_the_first_run_is_picked_up_by_a_tick(tmp_path):
    inst = instrument(tmp_path / "live.duckdb", service_name="web")
    try:
        data = DataStore(inst.store, live=True, waiting_for="OTLP/HTTP http://127.0.0.1:1")
        assert data.state() == "no_runs"
        assert data.refresh() is False  # nothing yet
        kit = SpanKit(inst)
        kit.span("GET /", 0, 1, {})
        kit.flush()
        data.tick()
        assert data.run_id == "live" and data.state() == "no_rows"
        assert data.frames["span_catalog"].spans.sum() == 1
    finally:
        inst.shutdown()


def spans(*rows) -> pd.DataFrame:
    return pd.DataFrame([{"span_id": sid, "parent_span_id": parent, "name": name,
                          "kind": "INTERNAL", "service": service, "start_ns": start,
                          "end_ns": end, "status_code": status, "status_message": None,
                          "attributes": '{"k": 1}', "is_open": end is None}
                         for sid, parent, name, service, start, end, status in rows])


def test_waterfall_rows_nest_children_and_keep_orphans_and_cycles():
    df = spans(("a", None, "root", "s1", 0, 10_000_000, "UNSET"),
               ("b", "a", "late child", "s1", 5_000_000, 6_000_000, "UNSET"),
               ("c", "a", "early child", "s2", 1_000_000, 2_000_000, "ERROR"),
               ("d", "gone", "orphan", "s2", 3_000_000, None, "UNSET"),
               ("e", "f", "cycle e", "s1", 7_000_000, 8_000_000, "UNSET"),
               ("f", "e", "cycle f", "s1", 7_500_000, 8_000_000, "UNSET"))
    rows = tp.waterfall_rows(df)
    assert list(rows.label) == ["root", "· early child", "· late child", "orphan", "cycle e",
                                "cycle f"]
    assert list(rows.depth) == [0, 1, 1, 0, 0, 0]
    assert list(rows.start_ms) == [0.0, 1.0, 5.0, 3.0, 7.0, 7.5]
    orphan = rows[rows.name == "orphan"].iloc[0]
    assert orphan.is_open and orphan.end_ms == 10.0  # open: drawn to the trace's latest time
    failed = rows[rows.name == "early child"].iloc[0]
    assert failed.color == "#d1495b" and failed["attrs"] == "k=1"
    plot = tp.waterfall_plot(rows, title="t")
    assert len(plot.get(0).data) == 5 and len(plot.get(1).data) == 1  # closed, open bars


def test_an_empty_waterfall_is_still_a_plot():
    rows = tp.waterfall_rows(pd.DataFrame())
    assert rows.empty and list(rows.columns) == tp.ROW_COLUMNS
    plot = tp.waterfall_plot(rows)
    assert len(plot) == 2
