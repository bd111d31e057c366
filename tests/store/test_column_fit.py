"""Every value is fitted to its column before it joins a commit (``rolloutscope.store.fit``),
and a group commit that still fails fails only the batches that caused it."""

from __future__ import annotations

import math
import threading

import pytest

from rolloutscope.store import RowBatch, RunStore
from rolloutscope.store.errors import StoreError, UnstorableBatchError
from rolloutscope.store.fit import MAX_NS, ColumnFitError
from rolloutscope.store.schema import COLUMNS
from rolloutscope.vocabulary import Attr


def _span(batch: RowBatch, attributes: dict, *, span_id: str = "00000000000000aa",
          start_ns=10, end_ns=20, events=(), name="s") -> None:
    batch.add_span(run_id="r", trace_id="0" * 31 + "1", span_id=span_id, parent_span_id=None,
                   name=name, kind="INTERNAL", service="svc", start_ns=start_ns, end_ns=end_ns,
                   status_code="UNSET", status_message=None, attributes=attributes,
                   resource_json=None, scope=None, events=events)


REFUSED = [
    ({Attr.CHECKPOINT_ID: ["a", "b"]}, "'nemo.gym.checkpoint.id' = ['a', 'b'] (list) does not "
                                       "fit column checkpoint_id (VARCHAR)"),
    ({Attr.CHECKPOINT_ID: 1.5}, "column checkpoint_id (VARCHAR): send a string"),
    ({Attr.RUN_ID: ["a"]}, "'nemo.run.id' = ['a'] (list) does not fit column run_id"),
    ({Attr.ROLLOUT_ID: {"k": 1}}, "column rollout_id (VARCHAR)"),
    ({Attr.CK_PARTICIPANT_KIND: True}, "column participant_kind (VARCHAR)"),
    ({Attr.RL_ATTEMPT: 2**40}, "out of range -2147483648..2147483647"),
    ({Attr.RL_ATTEMPT: math.inf}, "column attempt (INTEGER): not a finite number"),
    ({Attr.RL_ATTEMPT: math.nan}, "not a finite number"),
    ({Attr.RL_ATTEMPT: 2.5}, "has a fraction"),
    ({Attr.RL_ATTEMPT: True}, "a boolean is not an integer"),
    ({Attr.RL_ATTEMPT: "two"}, "not a decimal integer"),
    ({Attr.EPISODE_ATTEMPT: -2**31 - 1}, "column attempt (INTEGER): out of range"),
    ({Attr.SHARD_IDX: 1e300}, "column shard_idx (INTEGER): out of range"),
    ({Attr.PROMPT_IDX: 2**63}, "column prompt_idx (BIGINT): out of range"),
    ({Attr.PROMPT_IDX: [1]}, "column prompt_idx (BIGINT): not an integer"),
    ({Attr.OPEN_MARKER_FOR: ["x"]}, "column span_id (VARCHAR)"),
]


@pytest.mark.parametrize(("attributes", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_a_promoted_value_that_does_not_fit_refuses_the_span_and_adds_nothing(attributes,
                                                                              message):
    batch = RowBatch()
    _span(batch, {"keep": 1}, span_id="00000000000000bb")
    with pytest.raises(ColumnFitError, match="does not fit column") as info:
        _span(batch, {**attributes, "x": 1}, events=[("e", 15, {})])
    assert message in str(info.value)
    assert batch.rows == 1 and list(batch.tables) == ["spans"]


COERCED = [
    ({Attr.CHECKPOINT_ID: 7}, "checkpoint_id", "7", "stored as text '7'"),
    ({Attr.RUN_ID: 42}, "run_id", "42", "stored as text '42'"),
    ({Attr.RL_ATTEMPT: 3.0}, "attempt", 3, "= 3.0 (float) stored as 3"),
    ({Attr.SHARD_IDX: "5"}, "shard_idx", 5, "= '5' (str) stored as 5"),
]


@pytest.mark.parametrize(("attributes", "column", "stored", "note"), COERCED,
                         ids=[c for _, c, _, _ in COERCED])
def test_a_value_that_fits_without_loss_is_coerced_and_the_coercion_is_noted(
        attributes, column, stored, note):
    batch = RowBatch()
    _span(batch, attributes)
    assert batch.arrow("spans").column(column).to_pylist() == [stored]
    assert batch.coerced == 1 and note in batch.notes[0]
    assert batch.notes[0].startswith("span 00000000000000aa: attribute")


@pytest.mark.parametrize(("start", "end", "message"), [
    (2**63, 2**63 + 5, f"start time {2**63} is past the latest time the store holds ({MAX_NS}"),
    (10, 2**64 - 1, "end time 18446744073709551615 is past the latest time"),
    (1.5, 2, "start time 1.5 (float) is not an integer number of nanoseconds"),
    (-(2**63) - 1, 0, "is before the earliest time the store holds"),
])
def test_a_time_a_bigint_cannot_hold_refuses_the_span(start, end, message):
    batch = RowBatch()
    with pytest.raises(ColumnFitError, match="time") as info:
        _span(batch, {}, start_ns=start, end_ns=end)
    assert message in str(info.value) and batch.rows == 0


def test_an_event_that_does_not_fit_refuses_its_whole_span():
    batch = RowBatch()
    with pytest.raises(ColumnFitError, match="event 'late' time 9223372036854775808 is past"):
        _span(batch, {}, events=[("ok", 15, {}), ("late", 2**63, {})])
    with pytest.raises(ColumnFitError, match="column attempt"):
        _span(batch, {}, events=[("ok", 15, {Attr.RL_ATTEMPT: 2**40})])
    assert batch.rows == 0 and not batch.tables


def test_a_span_name_that_is_not_text_or_not_unicode_is_refused():
    batch = RowBatch()
    with pytest.raises(ColumnFitError, match="name 5 \\(int\\) is not a string"):
        _span(batch, {}, name=5)
    with pytest.raises(ColumnFitError, match="cannot be stored as JSON"):
        _span(batch, {"bad": "\ud800"})
    assert batch.rows == 0


@pytest.mark.parametrize(("values", "message"), [
    ({"ts_ns": 2**63}, "metrics.ts_ns (BIGINT) cannot hold 9223372036854775808: out of range"),
    ({"ts_ns": 1, "step": 10**30}, "metrics.step (BIGINT) cannot hold"),
    ({"ts_ns": 1, "count": 2**64 - 1}, "metrics.count (BIGINT) cannot hold"),
    ({"ts_ns": "1"}, "metrics.ts_ns (BIGINT) cannot hold '1' (str)"),
    ({"ts_ns": 1, "value": "1.5"}, "metrics.value (DOUBLE) cannot hold '1.5' (str)"),
    ({"ts_ns": 1, "value": 10**400}, "metrics.value (DOUBLE) cannot hold"),
    ({"ts_ns": 1, "name": b"m"}, "metrics.name (VARCHAR) cannot hold b'm' (bytes)"),
    ({"ts_ns": 1, "name": "\udc80"}, "metrics.name (VARCHAR) cannot hold"),
    ({"ts_ns": True}, "metrics.ts_ns (BIGINT) cannot hold True (bool)"),
])
def test_a_row_value_its_column_cannot_hold_is_refused_by_name(values, message):
    batch = RowBatch()
    with pytest.raises(ColumnFitError) as info:
        batch.add_row("metrics", run_id="r", **values)
    assert message in str(info.value) and batch.rows == 0


def test_a_row_value_that_fits_is_stored_as_its_column_type():
    batch = RowBatch()
    batch.add_row("metrics", run_id="r", name="m", ts_ns=5, value=3, step=2)
    assert batch.arrow("metrics").to_pylist()[0]["value"] == 3.0


def _poisoned(run_id: str) -> RowBatch:
    """Spans with an attempt no INTEGER holds, appended round the checks."""
    batch = RowBatch()
    _span(batch, {"x": 1})
    row = list(batch.tables["spans"][0])
    row[0] = run_id
    row[COLUMNS["spans"].index("attempt")] = 2**40
    batch.tables["spans"] = [tuple(row)]
    return batch


def _good(run_id: str, n: int) -> RowBatch:
    batch = RowBatch()
    for i in range(n):
        batch.append_span(run_id, f"{i + 1:032x}", f"{i + 1:016x}", None, "s", "INTERNAL", "svc",
                          10 + i, 20 + i, "UNSET", None, {"i": i}, None, None)
    return batch


def test_a_poisoned_batch_in_a_group_commit_fails_alone_and_the_others_commit(tmp_path):
    with RunStore(tmp_path / "run.duckdb") as store:
        # a long delay gathers all five batches into one group commit
        writer = store.writer(max_delay_ms=3000, max_rows=1_000_000)
        commits = {}
        for name in ("a", "b", "poison", "c", "d"):
            commits[name] = writer.submit(_poisoned(name) if name == "poison" else _good(name, 5))
        for name, commit in commits.items():
            if name == "poison":
                with pytest.raises(UnstorableBatchError, match="ArrowInvalid|OverflowError"):
                    commit.wait(30)
            else:
                assert commit.wait(30)
        rows = dict(store.query("SELECT run_id, count(*) FROM spans GROUP BY run_id"))
        assert rows == {"a": 5, "b": 5, "c": 5, "d": 5}
        assert store.query("SELECT run_id FROM runs ORDER BY run_id") == [
            ("a",), ("b",), ("c",), ("d",)]
        assert writer.stats.failed_rows == 1 and writer.stats.committed_rows == 20
        assert writer.submit(_good("after", 2)).wait(30)


def test_a_store_failure_fails_the_batches_it_held_and_not_later_ones(tmp_path):
    with RunStore(tmp_path / "run.duckdb") as store:
        writer = store.writer(max_delay_ms=1)
        broken = threading.Event()
        real = writer._commit

        def commit_once_broken(batches):
            if not broken.is_set():
                broken.set()
                raise StoreError("disk went away")
            return real(batches)

        writer._commit = commit_once_broken
        first = writer.submit(_good("held", 3))
        with pytest.raises(StoreError, match="disk went away") as info:
            first.wait(30)
        assert not isinstance(info.value, UnstorableBatchError)
        assert writer.submit(_good("later", 3)).wait(30)
        assert store.query("SELECT run_id, count(*) FROM spans GROUP BY ALL") == [("later", 3)]


def test_the_in_process_exporter_drops_only_the_span_that_cannot_be_stored(tmp_path):
    from rolloutscope.collectors.exporter import instrument

    inst = instrument(tmp_path / "run.duckdb", service_name="svc", run_id="in-process")
    tracer = inst.tracer()
    for i in range(100):
        # the SDK takes a list-valued checkpoint id, and a start past 2262, as given
        attrs = {Attr.CHECKPOINT_ID: ["a", "b"]} if i == 10 else {Attr.CHECKPOINT_ID: f"ck-{i}"}
        tracer.start_span("s", attributes=attrs).end()
    tracer.start_span("late", start_time=2**63).end(end_time=2**63 + 1)
    tracer.start_span("coerced", attributes={Attr.RL_ATTEMPT: 2.0}).end()
    assert inst.flush()
    assert (inst.exporter.exported_spans, inst.exporter.dropped_spans) == (100, 2)
    rows = inst.store.query("SELECT name, count(*), max(attempt) FROM spans GROUP BY name "
                            "ORDER BY name")
    assert rows == [("coerced", 1, 2), ("s", 99, None)]
    inst.shutdown()
