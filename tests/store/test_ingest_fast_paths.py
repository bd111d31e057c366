"""The ingest fast paths keep the store's rules: a run's first/last seen only ever widens, even
when the writer skips or narrows its SQL, and the positional span entry point files rows
exactly as the keyword one does."""

from __future__ import annotations

import pyarrow as pa
import pytest

from rolloutscope.store import RowBatch, RunStore
from rolloutscope.store.rows import arrow_from_buffers
from rolloutscope.vocabulary import Attr


def _spans(run_id: str, *bounds: tuple[int, int | None]) -> RowBatch:
    batch = RowBatch()
    for i, (start, end) in enumerate(bounds):
        batch.add_span(run_id=run_id, trace_id=f"{start:032x}", span_id=f"{i + 1:016x}",
                       parent_span_id=None, name="rl.train_step", kind="INTERNAL",
                       service="svc", start_ns=start, end_ns=end, status_code="UNSET",
                       status_message=None, attributes={}, resource_json=None, scope=None)
    return batch


def _seen(store: RunStore, run_id: str) -> tuple[int, int]:
    return store.query("SELECT first_seen_ns, last_seen_ns FROM runs WHERE run_id = ?",
                       [run_id])[0]


def test_first_and_last_seen_widen_and_never_narrow_across_commits(store_path):
    with RunStore(store_path) as store:
        writer = store.writer()
        writer.write(_spans("a", (100, 200)))
        assert _seen(store, "a") == (100, 200)
        writer.write(_spans("a", (120, 150)))          # inside what is known: no change
        assert _seen(store, "a") == (100, 200)
        writer.write(_spans("a", (50, 60), (300, None)))  # earlier start, later (open) start
        assert _seen(store, "a") == (50, 300)
        writer.write(_spans("b", (7, 8)))
        assert _seen(store, "b") == (7, 8)
        assert _seen(store, "a") == (50, 300)


def test_a_run_registered_or_written_before_this_writer_keeps_its_wider_bounds(store_path):
    with RunStore(store_path) as store:
        store.register_run("a", config={"timeout_s": 5})
        store.writer().write(_spans("a", (100, 200)))
    with RunStore(store_path) as store:               # a new writer knows nothing of "a"
        store.writer().write(_spans("a", (150, 160)))
        assert _seen(store, "a") == (100, 200)
        assert store.run_config("a") == {"timeout_s": 5}


def test_one_commit_with_several_runs_records_each(store_path):
    batch = _spans("a", (10, 20))
    batch.extend(_spans("b", (30, 40), (35, 90)))
    batch.extend(_spans("a", (5, 6)))
    with RunStore(store_path) as store:
        store.writer().write(batch)
        assert _seen(store, "a") == (5, 20)
        assert _seen(store, "b") == (30, 90)


def test_the_positional_and_keyword_span_entry_points_file_the_same_rows():
    attributes = {Attr.ROLLOUT_ID: "r-1", Attr.RL_ATTEMPT: 2, Attr.SHARD_IDX: "3", "x": 1.5}
    marker = {Attr.OPEN_MARKER_FOR: "00000000000000aa", Attr.OPEN_MARKER_PARENT: "0b", "y": 1}
    events = [("gym.rollout.ack", 7, {Attr.PROMPT_IDX: 4})]
    links = [("f" * 32, "e" * 16, {"why": "retry"})]
    by_keyword, positional = RowBatch(), RowBatch()
    for attrs in (attributes, marker, {}):
        by_keyword.add_span(run_id="run", trace_id="c" * 32, span_id="d" * 16,
                            parent_span_id=None, name="n", kind="INTERNAL", service="s",
                            start_ns=1, end_ns=2, status_code="OK", status_message=None,
                            attributes=attrs, resource_json='{"k":1}', scope="sc",
                            events=events, links=links)
        positional.append_span("run", "c" * 32, "d" * 16, None, "n", "INTERNAL", "s", 1, 2,
                               "OK", None, dict(attrs), '{"k":1}', "sc", events, links)
    assert by_keyword.rows == positional.rows
    for table in ("spans", "open_spans", "span_events", "span_links"):
        assert by_keyword.arrow(table).to_pylist() == positional.arrow(table).to_pylist()
    spans = positional.arrow("spans").to_pylist()
    assert (spans[0]["rollout_id"], spans[0]["attempt"], spans[0]["shard_idx"]) == ("r-1", 2, 3)
    assert spans[1]["rollout_id"] is None and spans[1]["attributes"] is None
    opened = positional.arrow("open_spans").to_pylist()
    assert [(o["span_id"], o["parent_span_id"], o["end_ns"], o["attributes"]) for o in opened] == [
        ("00000000000000aa", "0b", None, '{"y":1}')]
    # the marker's events and links arrive with the finished span, not with the marker
    assert positional.arrow("span_events").num_rows == 2


def test_compiled_codes_buffers_are_checked_against_the_schema_before_use():
    """``arrow_from_buffers`` takes its buffers as compiled code laid them out; a column laid
    out for another schema (offsets past the end of the text, too few bytes for the values) is
    an error there, not an array that reads past its buffer later."""
    schema = pa.schema([("name", pa.string()), ("n", pa.int64())])
    offsets = b"".join(v.to_bytes(4, "little") for v in (0, 3, 5))
    good = arrow_from_buffers([(None, offsets, b"abcde", 0),
                               (None, None, (7).to_bytes(8, "little") * 2, 0)], 2, schema)
    assert good.to_pydict() == {"name": ["abc", "de"], "n": [7, 7]}
    with pytest.raises(pa.ArrowInvalid, match="offsets"):  # the offsets pass the data's end
        arrow_from_buffers([(None, offsets, b"abc", 0),
                            (None, None, (7).to_bytes(8, "little") * 2, 0)], 2, schema)
    with pytest.raises(pa.ArrowInvalid):  # eight bytes for two int64 values
        arrow_from_buffers([(None, offsets, b"abcde", 0),
                            (None, None, (7).to_bytes(8, "little"), 0)], 2, schema)
