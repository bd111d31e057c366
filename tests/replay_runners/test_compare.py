"""The comparison: frames for the dashboard's Replay view, reports that escape every string."""

from __future__ import annotations

import pandas as pd
import pytest

from rolloutscope.store import RunStore
from rolloutscope.replay import compare
from rolloutscope.replay.errors import ReplayError
from rolloutscope.replay.replay_capture import ReplayOptions, capture_from_store, replay_run


@pytest.fixture(scope="module")
def before_after(capture_path, tmp_path_factory):
    path = capture_path("snapshot-outlasts-deadline")
    out = tmp_path_factory.mktemp("cmp") / "fixed.duckdb"
    capture = capture_from_store(path)
    result = replay_run(capture, out=out, variants=["pause-deadlines-during-snapshot"],
                        options=ReplayOptions(check_determinism=False))
    return path, capture.run_id, out, result.run_id


def test_timeline_frames_give_the_before_and_after_stories_on_one_time_axis(before_after):
    a, ra, b, rb = before_after
    with RunStore(a, read_only=True) as sa, RunStore(b, read_only=True) as sb:
        before, after = compare.timeline_frames(sa, ra, sb, rb)
    assert list(before.columns) == compare.TIMELINE_COLUMNS
    fired = before[before.kind == "deadline_fired"]
    assert list(zip(fired.start_s, fired.outcome, strict=True)) == [(180.0, "parked")]
    assert after[after.kind == "deadline_fired"].empty
    assert set(before.run) == {"before"} and set(after.run) == {"after"}


def test_the_comparison_aligns_snapshots_by_index_and_flags_changed_rollouts(before_after):
    a, ra, b, rb = before_after
    with RunStore(a, read_only=True) as sa, RunStore(b, read_only=True) as sb:
        cmp = compare.compare_runs(sa, ra, sb, rb)
    assert list(cmp.snapshots.outcome_a) == ["committed", "failed", "failed", "failed"]
    assert list(cmp.snapshots.outcome_b) == ["committed"] * 4
    row = cmp.rollouts.iloc[0]
    assert (row.tries_a, row.tries_b, bool(row.changed)) == (2, 1, True)
    stranded = cmp.outcomes.set_index("metric").loc["stranded"]
    assert (stranded.a, stranded.b, stranded.delta) == (1, 0, -1)


def test_the_comparison_reads_each_runs_time_zero_once(before_after, monkeypatch):
    a, ra, b, rb = before_after
    read = []
    query = RunStore.query

    def counting(self, sql, *args, **kwargs):
        if "from run_thresholds" in " ".join(sql.lower().split()):
            read.append((str(self.path), args[0] if args else kwargs.get("params")))
        return query(self, sql, *args, **kwargs)

    monkeypatch.setattr(RunStore, "query", counting)
    with RunStore(a, read_only=True) as sa, RunStore(b, read_only=True) as sb:
        cmp = compare.compare_runs(sa, ra, sb, rb)
    assert len(cmp.timeline) and len(cmp.incidents)  # every reader ran
    assert sorted(read) == sorted([(str(a), [ra]), (str(b), [rb])])


def test_every_data_string_in_the_html_report_is_escaped():
    hostile = "<script>alert(1)</script>"
    frame = pd.DataFrame({"status": ["appeared"], "kind": ["stall"], "key_subject": [hostile],
                          "start_s_a": [None], "start_s_b": [1.0], "summary_a": [""],
                          "summary_b": [hostile]})
    empty = pd.DataFrame()
    cmp = compare.RunComparison(run_a=hostile, run_b="b&c", incidents=frame, outcomes=empty,
                                timings=empty, rollouts=pd.DataFrame({"changed": []}),
                                snapshots=empty, timeline=empty)
    html = compare.render_html(cmp, notes=(hostile,))
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "b&amp;c" in html


def test_a_report_path_must_say_markdown_or_html(before_after, tmp_path):
    a, ra, b, rb = before_after
    with RunStore(a, read_only=True) as sa, RunStore(b, read_only=True) as sb:
        cmp = compare.compare_runs(sa, ra, sb, rb)
    with pytest.raises(ReplayError, match=".md or .html"):
        compare.write_report(cmp, tmp_path / "r.txt")
    assert compare.write_report(cmp, tmp_path / "r.html").read_text().startswith("<!DOCTYPE")


def test_comparing_a_run_the_store_lacks_names_the_runs_it_has(before_after):
    a, ra, b, rb = before_after
    with RunStore(a, read_only=True) as sa, RunStore(b, read_only=True) as sb, \
            pytest.raises(compare.UnknownRunError, match=f"runs: {ra}"):
        compare.timeline_frames(sa, "nope", sb, rb)
