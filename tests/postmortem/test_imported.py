"""The import notebook's calls on the repository's fixtures: reports, incidents, evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolloutscope.postmortem import imported, run_tables

FIXTURES = Path(__file__).resolve().parents[1] / "importers" / "fixtures"
CONTROLLER_LOG = FIXTURES / "controller.log"
METRICS_JSONL = FIXTURES / "metrics.jsonl"


@pytest.fixture(scope="module")
def imported_run(tmp_path_factory):
    return imported.import_run(controller_log=CONTROLLER_LOG, metrics=METRICS_JSONL,
                               workdir=tmp_path_factory.mktemp("import"))


def test_both_files_land_in_one_run_with_their_reports(imported_run):
    run, reports = imported_run
    assert run.run_id == "imported" and run.path.name == "imported.duckdb"
    table = imported.report_table(reports)
    assert list(table.kind) == ["rl-log", "rl-metrics"]
    assert list(table.bad_count) == [4, 5]
    with run.open() as store:
        assert store.run_ids() == ["imported"]


def test_bad_records_are_quoted_with_file_and_line(imported_run):
    _, reports = imported_run
    bad = imported.bad_records(reports)
    assert len(bad) == 9
    assert bad["where and why"][0].startswith(f"{CONTROLLER_LOG}:20: malformed shard_transition")
    assert imported.bad_lines(reports[0]) == {("controller.log", n) for n in (20, 21, 23, 24)}


def test_the_imported_run_shows_the_quarantine_before_the_stall(imported_run):
    run, _ = imported_run
    with run.open() as store:
        stall = run_tables.earliest_incident(store, run.run_id, "stall")
        quarantine = run_tables.earliest_incident(store, run.run_id, "quarantine")
    assert quarantine["subject"] == "shard 1" and quarantine["start_s"] == 90.0
    assert stall["start_s"] == 120.0
    assert "12 groups committed, step 3/150" in stall["summary"]


def test_progress_freezes_at_twelve_groups_and_three_steps(imported_run):
    run, _ = imported_run
    with run.open() as store:
        moved = run_tables.watchdog_changes(store, run.run_id, imported.STALL_METRICS,
                                      watch=imported.PROGRESS_METRICS)
    assert list(moved.t_s) == [30.0, 60.0, 90.0, 120.0, 2400.0]
    last = moved.iloc[-1]
    assert (last["rollout/committed_total"], last["rollout/train_steps"],
            last["rollout/inflight"], last["rollout/idle_s"]) == (12, 3, 0, 2280)


def test_the_router_follows_the_fleet_one_sample_later(imported_run):
    run, _ = imported_run
    with run.open() as store:
        moved = run_tables.watchdog_changes(store, run.run_id, imported.QUARANTINE_METRICS)
    by_t = moved.set_index("t_s")
    assert by_t.loc[120.0, "gen_fleet/serving_shards"] == 1
    assert by_t.loc[120.0, "router/serving_backends"] == 2
    assert by_t.loc[150.0, "router/serving_backends"] == 1


def test_the_log_evidence_leaves_out_lines_the_import_refused(imported_run):
    run, reports = imported_run
    with run.open() as store:
        everything = imported.log_lines(store, run.run_id, imported.QUARANTINE_LINES)
        parsed = imported.log_lines(store, run.run_id, imported.QUARANTINE_LINES,
                                    leave_out=imported.bad_lines(reports[0]))
    assert {20, 21} <= set(everything.line)
    assert list(parsed.line) == [11, 12, 13, 15, 30]
    assert "shard 1 suspect -> dead" in parsed.body[3]


def test_the_stall_evidence_has_no_weight_sync_after_the_third_step(imported_run):
    run, reports = imported_run
    with run.open() as store:
        lines = imported.log_lines(store, run.run_id, imported.STALL_LINES,
                                   leave_out=imported.bad_lines(reports[0]))
    kinds = list(lines.kind)
    assert kinds == ["train_step", "weight_sync_done", "train_step", "weight_sync_done",
                     "train_step", "stall", "stall"]


def test_a_failed_import_is_an_error_with_the_commands_message(tmp_path):
    with pytest.raises(imported.PostmortemError, match="no such file"):
        imported.import_files("rl-log", [tmp_path / "missing.log"], db=tmp_path / "x.duckdb",
                              run_id="r")
