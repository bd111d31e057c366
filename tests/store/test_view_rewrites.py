"""Views rewritten for speed give the rows their plain formulations gave.

reference_views/ keeps, for every view rewritten to scale (one aggregate instead of a join of
two, buckets instead of a window over every commit, a join instead of correlated counts), the
plain text it replaced. Both sets are installed as temporary views of their own cursor over the
same run file and every view is compared row for row (as multisets: view order is not part of
the contract), on each built-in scenario's replay, on the real Gym 0.7.0 capture posted to a
collector, and on a small synthetic run whose released-Gym share carries the HTTP shapes
(a wedged backend, rate-limit storms, failed /run replies) the replays do not make.

previous_views/ keeps, for every view that has since gained rows of other dialects or columns,
its text before: on the same inputs, the packaged view's rows read on the previous text's
columns, less the rows of the sources it did not read, are the previous rows.
"""

from __future__ import annotations

from contextlib import closing
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RunStore, views
from tests.gym_capture import collect_capture
from tests.synthetic_run import synthetic_run
from tests.replay.test_scenario_incidents import EXPECTED

REFERENCE = Path(__file__).parent / "reference_views"
PREVIOUS = Path(__file__).parent / "previous_views"
# the sources of each previous view's rows (model_calls: Gym's spans and plain HTTP requests)
PREVIOUS_SOURCES = {"model_calls": ("gym", "http")}
_FILE = re.compile(r"^\d\d_([a-z_]+)\.sql$")

SCENARIOS = sorted({(name, variants) for name, variants, _ in EXPECTED})


def reference_texts() -> dict[str, str]:
    out = {}
    for path in sorted(REFERENCE.iterdir()):
        m = _FILE.match(path.name)
        assert m, f"{path.name}: reference views are named NN_<view>.sql"
        out[m.group(1)] = path.read_text()
    return out


def previous_texts() -> dict[str, str]:
    out = {}
    for path in sorted(PREVIOUS.iterdir()):
        m = _FILE.match(path.name)
        assert m, f"{path.name}: previous views are named NN_<view>.sql"
        out[m.group(1)] = path.read_text()
    return out


def _previous_rows(cur, name: str, text: str) -> tuple[Counter, Counter]:
    """(the previous text's rows, the packaged view's rows on its columns and sources)."""
    before = f"{name}_before"
    cur.execute(views.as_temporary(re.sub(rf"\b{name}(_of)?\b", rf"{before}\1", text)))
    columns = [d[0] for d in cur.execute(f"SELECT * FROM {before} LIMIT 0").description]
    sources = ", ".join(f"'{s}'" for s in PREVIOUS_SOURCES[name])
    return (_rows(cur, before),
            _rows(cur, f"SELECT {', '.join(columns)} FROM {name} WHERE source IN ({sources})"))


def _install(cur, texts: dict[str, str]) -> None:
    for name, _ in views.definitions():
        cur.execute(views.as_temporary(texts[name]))


def _norm(value):
    """Floats to 12 significant digits: a sum's last bits depend on the order it ran in."""
    if isinstance(value, float):
        return value if math.isnan(value) else float(f"{value:.12g}")
    if isinstance(value, (list, tuple)):
        return type(value)(_norm(v) for v in value)
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


def _rows(cur, view: str) -> Counter:
    """The rows of a view (or of a query) as a multiset."""
    sql = view if view.startswith("SELECT") else f"SELECT * FROM {view}"
    return Counter(repr(_norm(r)) for r in cur.execute(sql).fetchall())


def differences(path: Path) -> dict[str, tuple[int, int, list[str]]]:
    """view -> (reference rows, packaged rows, a few rows only one side has), where they differ;
    also the number of incident rows seen, so a caller can tell the comparison had data."""
    packaged = dict(views.definitions())
    reference = {**packaged, **reference_texts()}
    out = {}
    # cursors of their own: store.cursor() hands one thread the same cursor each time when the
    # file's views are older than this checkout's, and the two sets must not overwrite each other
    with RunStore(path, read_only=True) as store, closing(store.new_cursor()) as new, \
            closing(store.new_cursor()) as old:
        _install(new, packaged)
        _install(old, reference)
        for name, _ in views.definitions():
            a, b = _rows(old, name), _rows(new, name)
            if a != b:
                out[name] = (sum(a.values()), sum(b.values()),
                             [f"- {r[:300]}" for r in list((a - b).elements())[:3]]
                             + [f"+ {r[:300]}" for r in list((b - a).elements())[:3]])
        for name, text in previous_texts().items():
            a, b = _previous_rows(new, name, text)
            if a != b:
                out[f"{name} (previous)"] = (
                    sum(a.values()), sum(b.values()),
                    [f"- {r[:300]}" for r in list((a - b).elements())[:3]]
                    + [f"+ {r[:300]}" for r in list((b - a).elements())[:3]])
        incidents = new.execute("SELECT count(*) FROM incidents").fetchall()[0][0]
    return out, incidents


def test_every_reference_names_a_packaged_view_and_differs_from_it():
    packaged = dict(views.definitions())
    for name, text in reference_texts().items():
        assert name in packaged, f"{name}: no packaged view of that name"
        assert text != packaged[name], f"{name}: the reference is the packaged text"


@pytest.mark.parametrize(("name", "variants"), SCENARIOS,
                         ids=[n + "".join(f"+{v}" for v in vs) for n, vs in SCENARIOS])
def test_a_scenarios_replay_reads_the_same_through_both(tmp_path, name, variants):
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        replay_into_store(get(name), store,
                          variants=[v for v in variants if not v.startswith("-")],
                          without=[v[1:] for v in variants if v.startswith("-")])
    diff, _ = differences(path)
    assert not diff, diff


def test_the_gym_capture_reads_the_same_through_both(tmp_path):
    diff, _ = differences(collect_capture(tmp_path / "gym.duckdb"))
    assert not diff, diff


def test_a_synthetic_run_with_http_incidents_reads_the_same_through_both(tmp_path):
    path = synthetic_run(tmp_path / "synthetic.duckdb", spans=60_000)
    diff, incidents = differences(path)
    assert not diff, diff
    with RunStore(path, read_only=True) as store:
        kinds = set(store.view("incidents").kind)
    # the run exercises the rewritten views' branches: the HTTP side of wedged_backend and
    # retry_storm, a stall, and completions left unacknowledged
    assert {"wedged_backend", "retry_storm", "stall", "stranded_completion",
            "deadline_fired_while_parked"} <= kinds, kinds
    assert incidents > 0


def test_the_comparison_sees_a_reference_that_reads_differently(tmp_path, monkeypatch):
    """The two sets of views really are compared: a reference that drops the failed tries is
    reported, on a file whose stored views are older than this version's (where the store
    hands a thread one cursor with the current views) as on a current one."""
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        replay_into_store(get("snapshot-outlasts-deadline"), store)
    texts = reference_texts()
    texts["rl_attempts"] = dict(views.definitions())["rl_attempts"].replace(
        "WHERE name = 'rl.rollout.attempt'\n",
        "WHERE name = 'rl.rollout.attempt' AND status_code <> 'ERROR'\n", 1)
    assert texts["rl_attempts"] != dict(views.definitions())["rl_attempts"]
    monkeypatch.setattr(f"{__name__}.reference_texts", lambda: texts)
    diff, _ = differences(path)
    assert "rl_attempts" in diff, diff
    with RunStore(path) as store:  # as an older version left it: other stored views
        store.query("UPDATE store_meta SET value = 'older' WHERE key = 'views_digest'")
    diff, _ = differences(path)
    assert "rl_attempts" in diff, diff


def test_the_comparison_sees_a_previous_view_whose_rows_changed(tmp_path, monkeypatch):
    """The previous rows really are compared: a previous text that also counts the 5xx tries
    as rate-limited reads differently from the packaged view on a run with such tries."""
    path = synthetic_run(tmp_path / "synthetic.duckdb", spans=20_000)
    texts = previous_texts()
    texts["model_calls"] = texts["model_calls"].replace(
        "h.http_status IN (429, 502, 503, 504, 520)) AS rate_limited",
        "h.http_status >= 500) AS rate_limited", 1)
    assert texts["model_calls"] != previous_texts()["model_calls"]
    monkeypatch.setattr(f"{__name__}.previous_texts", lambda: texts)
    diff, _ = differences(path)
    assert "model_calls (previous)" in diff, diff
