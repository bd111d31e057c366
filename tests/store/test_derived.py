"""Maintained model rows (rolloutscope/store/derived.py) equal the views computed from scratch:
on every built-in scenario derived in many passes as its spans are committed, on the Gym 0.7.0
capture as a collector wrote it, on a synthetic run, on engines scraped behind a fleet, after a
kill -9 in the middle of ingest, and on a store written before the rows were maintained."""

from __future__ import annotations

import math
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

import duckdb
import pytest

import rolloutscope.replay.run_scenario as runner
from rolloutscope.collectors.exporter import StoreSpanExporter, instrument
from rolloutscope.replay.scenarios import get, names
from rolloutscope.store import RunStore, derived, views
from tests.child_output import read_line
from tests.engine_metrics import write_engine_run
from tests.gym_capture import collect_capture
from tests.store.conftest import T0, SpanKit
from tests.store.test_view_rewrites import _norm
from tests.synthetic_run import synthetic_run

ROOT = Path(__file__).parents[2]


def _rows(cur, relation: str) -> Counter:
    return Counter(repr(_norm(r)) for r in cur.execute(f"SELECT * FROM {relation}").fetchall())


def _strip(path: Path) -> None:
    """``path`` as a store written before its rows were maintained."""
    con = duckdb.connect(str(path))
    for table in (*(f"d_{name}" for name in derived.MAINTAINED), *derived.SUMMARY_TABLES,
                  "derive_state"):
        con.execute(f"DROP TABLE {table}")
    for schema in derived.SCHEMAS:
        con.execute(f"DROP SCHEMA {schema} CASCADE")
    con.close()


# span_catalog's maintained median_s is read from durations kept to DURATION_DIGITS significant
# digits: within half a unit of the last digit kept, relative (0.5% at 3 digits)
MEDIAN_REL_TOL = 0.5 * 10 ** (1 - derived.DURATION_DIGITS)


def _medians_apart(cur) -> Counter:
    """span_catalog's keys whose maintained median_s is not within MEDIAN_REL_TOL of the
    view's (or is NULL where the other is not), as rows only the view has."""
    key = "run_id, service, name, kind"
    apart = Counter()
    for *k, a, b in cur.execute(
            f"SELECT v.{key.replace(', ', ', v.')}, v.median_s, m.median_s "
            "FROM span_catalog v FULL JOIN rs_read.span_catalog m ON "
            + " AND ".join(f"v.{c} IS NOT DISTINCT FROM m.{c}" for c in key.split(", "))
            ).fetchall():
        if (a is None) != (b is None) or (
                a is not None and not math.isclose(a, b, rel_tol=MEDIAN_REL_TOL, abs_tol=1e-12)):
            apart[f"median_s of {k}: {a} against {b}"] += 1
    return apart


def differences(path: Path) -> tuple[dict, dict[str, int]]:
    """view -> (from-scratch rows, maintained rows, a few rows only one side has) where they
    differ, and each maintained table's row count (so a caller sees the rows were derived)."""
    out = {}
    with RunStore(path, read_only=True) as store, closing(store.new_cursor()) as cur:
        assert derived.available(cur)
        for name, _ in views.definitions():
            if name == "span_catalog":  # its median within the kept histogram's precision
                a = _rows(cur, "(SELECT * EXCLUDE (median_s) FROM span_catalog)")
                b = _rows(cur, "(SELECT * EXCLUDE (median_s) FROM rs_read.span_catalog)")
                a.update(_medians_apart(cur))
            else:
                a, b = _rows(cur, name), _rows(cur, f"rs_read.{name}")
            if a != b:
                out[name] = (sum(a.values()), sum(b.values()),
                             [f"- {r[:300]}" for r in list((a - b).elements())[:3]]
                             + [f"+ {r[:300]}" for r in list((b - a).elements())[:3]])
        # the per-second sums kept beside them, and what the views' rows sum to
        a = _rows(cur, f"({derived.measures_sql(None)})")
        b = _rows(cur, "(SELECT run_id, sec_ns, measure, sum(value) FROM ("
                       "SELECT nullif(run_id, '') AS run_id, sec_ns, measure, value "
                       "FROM d_run_seconds UNION ALL "
                       f"SELECT * FROM ({derived.measures_sql('rs_tail')})) GROUP BY ALL)")
        if a != b:
            out["d_run_seconds"] = (sum(a.values()), sum(b.values()),
                                    [f"- {r}" for r in list((a - b).elements())[:3]]
                                    + [f"+ {r}" for r in list((b - a).elements())[:3]])
        counts = {name: cur.execute(f"SELECT count(*) FROM d_{name}").fetchall()[0][0]
                  for name in (*derived.MAINTAINED, "run_seconds", "completions",
                               "span_catalog", "span_durations")}
    return out, counts


class _PassPerExport(StoreSpanExporter):
    """The replay's exporter, committing and deriving every few spans: the rows are
    derived in many passes, open markers and the spans that end them arriving in between."""

    passes = 0

    def export(self, spans):
        chunk = max(20, len(spans) // 25)  # a small scenario in a few passes, a large in ~25
        for i in range(0, len(spans), chunk):
            result = super().export(spans[i:i + chunk])
            assert self._store.writer().flush(60)
            with closing(self._store.new_cursor()) as cur:
                if derived.derive(cur):
                    type(self).passes += 1
        return result


@pytest.mark.parametrize("name", names())
def test_a_scenario_derived_in_passes_reads_as_the_views(tmp_path, monkeypatch, name):
    monkeypatch.setattr(runner, "StoreSpanExporter", _PassPerExport)
    # the passes are the exporter's: the writer's own would race them for the watermark
    monkeypatch.setattr(derived, "PASS_AFTER_SPANS", 10**12)
    monkeypatch.setattr(derived, "PASS_EVERY_S", 10**9)
    # the steps kept on every pass that settles one
    monkeypatch.setattr(derived, "KEEP_STEPS_EVERY_S", 0.0)
    monkeypatch.setattr(derived, "STEP_SETTLE_NS", 0)
    _PassPerExport.passes = 0
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        runner.replay_into_store(get(name), store)
    assert _PassPerExport.passes >= 2, "the rows were derived in one pass only"
    diff, counts = differences(path)
    assert not diff, diff
    assert sum(counts.values()) > 0, counts


class _CommitPerExport(StoreSpanExporter):
    """The replay's exporter, committing every few spans (the writer derives after each
    commit); ``foreign_after`` chunks in, a row of the run is written to ``spans`` beside the
    writer, as another writer in the process would."""

    foreign_after: int | None = None

    def export(self, spans):
        chunk = max(20, len(spans) // 25)
        for n, i in enumerate(range(0, len(spans), chunk)):
            result = super().export(spans[i:i + chunk])
            assert self._store.writer().flush(60)
            if n == self.foreign_after:
                with closing(self._store.new_cursor()) as cur:
                    cur.execute("INSERT INTO spans SELECT * REPLACE (span_id || '-x' AS span_id) "
                                "FROM spans LIMIT 1")
        return result


@pytest.mark.parametrize("foreign", [False, True], ids=["writer-alone", "another-writer"])
def test_the_writers_passes_read_the_spans_it_held_and_read_as_the_views(
        tmp_path, monkeypatch, foreign):
    """A writer's pass reads the Arrow slices it committed since its last pass (derived.Held),
    not the table; a row another writer adds makes the next pass read the table instead, and
    the passes after it read what the writer held again."""
    monkeypatch.setattr(runner, "StoreSpanExporter", _CommitPerExport)
    monkeypatch.setattr(_CommitPerExport, "foreign_after", 3 if foreign else None)
    monkeypatch.setattr(derived, "PASS_AFTER_SPANS", 1)  # a pass after every commit
    monkeypatch.setattr(derived, "KEEP_STEPS_EVERY_S", 0.0)
    monkeypatch.setattr(derived, "STEP_SETTLE_NS", 0)
    inputs = []  # per pass of the writer with rows to derive: whether it read its held slices
    pass_input = derived._pass_input

    def spied(con, spans, events, held=None):
        if held is not None and (spans[1] > spans[0] or events[1] > events[0]):
            inputs.append(held.covers(spans, events))
        return pass_input(con, spans, events, held)

    monkeypatch.setattr(derived, "_pass_input", spied)
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        runner.replay_into_store(get("demo"), store)
        assert store.writer().flush(60)
        held_passes = store.writer().stats.derive_held_passes
    assert len(inputs) >= 10 and held_passes == sum(inputs), (inputs, held_passes)
    if foreign:
        assert inputs.count(False) == 1 and all(inputs[inputs.index(False) + 1:]), inputs
    else:
        assert all(inputs), inputs
    diff, counts = differences(path)
    assert not diff, diff
    assert counts["rl_attempts"] > 10 and counts["deadlines"] > 10, counts


def test_the_gym_capture_reads_as_the_views(tmp_path):
    diff, _ = differences(collect_capture(tmp_path / "gym.duckdb"))
    assert not diff, diff


def test_a_synthetic_run_reads_as_the_views(tmp_path):
    path = synthetic_run(tmp_path / "synthetic.duckdb", spans=60_000)
    diff, counts = differences(path)
    assert not diff, diff
    assert counts["deadlines"] > 1000 and counts["parked_intervals"] > 100, counts
    assert counts["rl_attempts"] > 1000 and counts["run_seconds"] > 100, counts
    assert counts["completions"] > 100 and counts["span_catalog"] > 10, counts


def test_a_synthetic_run_written_in_commits_reads_as_the_views(tmp_path):
    """Written as a collector writes a large run: in commits in start order, each followed by
    a pass, so rows whose spans and events land in different commits are derived apart."""
    path = synthetic_run(tmp_path / "synthetic.duckdb", spans=60_000, commits=7)
    with RunStore(path, read_only=True) as store:
        assert store.query("SELECT passes FROM derive_state")[0][0] >= 7
    diff, counts = differences(path)
    assert not diff, diff
    assert counts["rl_attempts"] > 1000 and counts["run_seconds"] > 100, counts


def test_engines_scraped_behind_a_fleet_read_as_the_views(tmp_path):
    """The engine views read the scraped metrics and the maintained shard stays alike."""
    path = tmp_path / "engines.duckdb"
    inst = instrument(path, service_name="tests", run_id="engines")
    try:
        write_engine_run(SpanKit(inst), "engines", t0_ns=T0)
        assert inst.flush()
    finally:
        inst.shutdown()
    diff, counts = differences(path)
    assert not diff, diff
    assert counts["shard_states"] == 3, counts
    with RunStore(path, read_only=True) as store:
        kinds = store.query("SELECT kind FROM rs_read.incidents WHERE kind LIKE 'engine%'")
    assert sorted(k for (k,) in kinds) == ["engine_backlog_while_healthy", "engine_saturated",
                                           "engine_wedged"]


def test_rows_not_derived_yet_are_read_from_their_spans(tmp_path, monkeypatch):
    """Between passes a reader sees every row: the maintained ones and those computed from the
    spans past the watermark (``rs_tail``)."""
    monkeypatch.setattr(derived, "PASS_AFTER_SPANS", 10**12)
    monkeypatch.setattr(derived, "PASS_EVERY_S", 10**9)
    path = tmp_path / "run.duckdb"
    store = RunStore(path)
    try:
        runner.replay_into_store(get("snapshot-outlasts-deadline"), store)
        store.writer().flush(60)
        with store.cursor() as cur:
            done, total, _, _ = derived.pending(cur)
            assert done == 0 and total > 0
            assert cur.execute("SELECT count(*) FROM d_deadlines").fetchall()[0][0] == 0
            for name, _ in views.definitions():
                assert _rows(cur, name) == _rows(cur, f"rs_read.{name}"), name
    finally:
        store.close()
    with RunStore(path, read_only=True) as store, store.cursor() as cur:
        done, total, _, _ = derived.pending(cur)
        assert done == total  # the close derived the rest


def test_run_ids_read_from_the_kept_catalogue_are_every_run_of_the_spans(tmp_path):
    """``run_ids`` of a store that keeps its rows reads the span catalogue and the spans not
    derived yet, not every span: the same runs, a span that names none left out."""
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        runner.replay_into_store(get("demo"), store, run_id="kept")
    with duckdb.connect(str(path)) as con:  # after the store's last pass: derived by none
        con.execute("INSERT INTO spans SELECT * REPLACE ('late' AS run_id, span_id || 'l' AS "
                    "span_id) FROM spans LIMIT 3")
        con.execute("INSERT INTO spans SELECT * REPLACE (NULL AS run_id, span_id || 'n' AS "
                    "span_id) FROM spans LIMIT 1")
        con.execute("INSERT INTO runs (run_id, source) VALUES ('registered', 'test')")
    with RunStore(path, read_only=True) as store:
        assert store.maintained
        scanned = [r[0] for r in store.query(
            "SELECT run_id FROM (SELECT run_id FROM runs UNION SELECT DISTINCT run_id FROM spans) "
            "WHERE run_id IS NOT NULL ORDER BY run_id")]
        assert store.run_ids() == scanned == ["kept", "late", "registered"]


def test_an_older_store_is_brought_up_to_date_on_first_write(tmp_path, caplog):
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        runner.replay_into_store(get("demo"), store)
    _strip(path)
    with RunStore(path, read_only=True) as store, store.cursor() as cur:
        assert not derived.available(cur)
        assert store.relation("deadlines") == "deadlines"  # read-only: the views, as before
    with caplog.at_level("INFO"), RunStore(path):
        pass
    assert any("derived the model rows" in r.getMessage() for r in caplog.records)
    diff, counts = differences(path)
    assert not diff and counts["deadlines"] > 0, (diff, counts)


_WRITER = textwrap.dedent("""
    import sys
    from rolloutscope.replay.run_scenario import replay_into_store
    from rolloutscope.replay.scenarios import get
    from rolloutscope.store import RunStore, derived
    derived.PASS_AFTER_SPANS = 500
    store = RunStore(sys.argv[1])
    store.writer(max_rows=400)
    seed = 0
    while True:
        replay_into_store(get("demo"), store, seed=seed, run_id=f"r{seed}")
        store.writer().flush(60)
        print("replayed", seed, store.writer().stats.derive_passes, flush=True)
        seed += 1
""")


def test_kill_9_while_deriving_then_reopen_derives_the_rest(tmp_path):
    path = tmp_path / "run.duckdb"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        passes = 0
        while passes < 3:  # killed while later replays commit and derive
            line = read_line(proc.stdout, time.monotonic() + 120)
            assert line, proc.stderr.read().decode()[-2000:]
            passes = int(line.split()[2])
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    with RunStore(path) as store:  # replays the WAL; derives what the kill left pending
        runs = store.run_ids()
    assert len(runs) >= 2
    diff, counts = differences(path)
    assert not diff, diff
    assert counts["deadlines"] > 0


def _cli(*argv: str) -> str:
    out = subprocess.run([sys.executable, "-m", "rolloutscope", *argv], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_info_and_incidents_read_the_same_from_the_maintained_rows(tmp_path):
    """`info` and `incidents` print the same on a store with maintained rows and on the same
    spans without them (read from every span), but for info's list of views it counted."""
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        runner.replay_into_store(get("demo"), store)
        runner.replay_into_store(get("chaos-kill-serving"), store)
    plain = tmp_path / "plain.duckdb"
    shutil.copy(path, plain)
    _strip(plain)

    def info(p):
        return [line for line in _cli("info", str(p)).splitlines()[1:]
                if "model views:" not in line and "keeps no maintained rows" not in line]

    assert info(path) == info(plain)
    for argv in ([], ["--json"], ["--since", "5m"], ["--kind", "quarantine"]):
        assert _cli("incidents", str(path), *argv) == _cli("incidents", str(plain), *argv), argv


def test_incidents_since_and_step_select_by_time(tmp_path):
    import json

    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        runner.replay_into_store(get("demo"), store, run_id="demo")
        last = store.query("SELECT last_seen_ns FROM runs WHERE run_id = 'demo'")[0][0]
        steps = store.query("SELECT count(*) FROM spans WHERE name = 'rl.train_step'")[0][0]
    every = json.loads(_cli("incidents", str(path), "--json"))
    assert len(every) >= 4
    since = json.loads(_cli("incidents", str(path), "--json", "--since", "5m"))
    cutoff = last - 300 * 10**9
    assert since == [i for i in every if i["end_ns"] is None or i["end_ns"] >= cutoff]
    assert 0 < len(since) < len(every)
    bad = subprocess.run([sys.executable, "-m", "rolloutscope", "incidents", str(path),
                          "--since", "soon"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--since 'soon'" in bad.stderr
    assert steps > 2  # the demo trains
    with RunStore(path, read_only=True) as store:
        ends = [r[0] for r in store.query("SELECT end_ns FROM spans WHERE run_id = 'demo' AND "
                                          "name = 'rl.train_step' ORDER BY end_ns")]
    for step in (1, 2, steps):
        lo, hi = ends[step - 2] if step > 1 else 0, ends[step - 1]
        one = json.loads(_cli("incidents", str(path), "--json", "--run-id", "demo",
                              "--step", str(step)))
        assert one == [i for i in every if i["start_ns"] <= hi
                       and (i["end_ns"] is None or i["end_ns"] >= lo)], step
    missing = subprocess.run([sys.executable, "-m", "rolloutscope", "incidents", str(path),
                              "--run-id", "demo", "--step", "99999"], capture_output=True,
                             text=True, cwd=ROOT)
    assert missing.returncode == 2 and "step" in missing.stderr


def test_a_kept_sum_that_differs_from_the_views_is_reported(tmp_path):
    """The per-second sums really are compared: one second's count off by one is found."""
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        runner.replay_into_store(get("demo"), store)
    assert differences(path) == ({}, differences(path)[1])
    con = duckdb.connect(str(path))
    con.execute("UPDATE d_run_seconds SET value = value + 1 WHERE sec_ns = "
                "(SELECT min(sec_ns) FROM d_run_seconds WHERE measure = 'committed') "
                "AND measure = 'committed'")
    con.close()
    diff, _ = differences(path)
    assert list(diff) == ["d_run_seconds"], diff


def test_a_closed_store_keeps_its_incidents_while_nothing_changes(tmp_path, monkeypatch):
    """A store closes keeping its incidents: a reader of it reads them kept, and they are the
    detectors' rows; once anything is committed after, readers compute them again."""
    monkeypatch.setattr(derived, "KEEP_INCIDENTS_FROM_SPANS", 0)
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        runner.replay_into_store(get("snapshot-outlasts-deadline"), store)
    with RunStore(path, read_only=True) as store, store.cursor() as cur:
        assert store.relation("incidents") == "main.d_incidents"
        kept = _rows(cur, "main.d_incidents")
        assert kept == _rows(cur, "incidents") == _rows(cur, "rs_read.incidents")
        assert sum(kept.values()) >= 1
    with RunStore(path) as store:  # one more run: the kept rows no longer say everything
        runner.replay_into_store(get("snapshot-outlasts-deadline"), store, run_id="again")
        store.writer().flush(60)
        assert store.relation("incidents") == "rs_read.incidents"
        with store.cursor() as cur:
            assert not derived.incidents_kept_current(cur)
            assert sum(_rows(cur, "rs_read.incidents").values()) == 2 * sum(kept.values())
    with RunStore(path, read_only=True) as store, store.cursor() as cur:  # kept again at close
        assert store.relation("incidents") == "main.d_incidents"
        assert _rows(cur, "main.d_incidents") == _rows(cur, "incidents")
        # and every step with them, the latest and the groups still running included
        for name in derived.STEP_VIEWS:
            assert store.relation(name) == f"main.d_final_{name}"
            assert _rows(cur, f"main.d_final_{name}") == _rows(cur, name)
        assert sum(_rows(cur, "main.d_final_step_ledger").values()) >= 2


def test_an_open_marker_makes_the_kept_incidents_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(derived, "KEEP_INCIDENTS_FROM_SPANS", 0)
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        runner.replay_into_store(get("demo"), store)
    con = duckdb.connect(str(path))
    assert derived.incidents_kept_current(con)
    con.execute("INSERT INTO open_spans SELECT * FROM spans LIMIT 1")
    assert not derived.incidents_kept_current(con)
    con.close()


def test_small_stores_keep_no_incidents(tmp_path):
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        runner.replay_into_store(get("demo"), store)
    with RunStore(path, read_only=True) as store:
        assert store.relation("incidents") == "rs_read.incidents"
