"""``rolloutscope replay`` and ``rolloutscope sweep`` as a user runs them."""

from __future__ import annotations

import json

from rolloutscope.cli import main
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RunStore


def test_replay_with_a_fix_writes_the_new_run_and_an_html_report(capture_path, tmp_path,
                                                                  capsys):
    out, report = tmp_path / "new.duckdb", tmp_path / "report.html"
    rc = main(["replay", str(capture_path("lost-reply")), "--variant", "retire-then-adopt",
               "--out", str(out), "--report", str(report), "--no-determinism-check"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "incident stranded_completion (p00000-1 try 0) vanished" in text
    assert "stranded_completion (p00000-1 try 0): vanished in the replay" in report.read_text()
    with RunStore(out, read_only=True) as store:
        (parent, source, meta), = store.query("SELECT parent_run_id, source, metadata FROM runs")
    assert (parent, source) == ("lost-reply.s0", "replay")
    assert json.loads(meta)["scenario_document"]["name"] == "lost-reply"


def test_replay_of_an_incident_window_reproduces_it(capture_path, tmp_path, capsys):
    path = capture_path("worker-lost-in-commit")
    main(["incidents", str(path), "--json"])
    incident = json.loads(capsys.readouterr().out)[0]
    rc = main(["replay", str(path), "--incident", incident["incident_id"], "--out",
               str(tmp_path / "w.duckdb"), "--fail-on-divergence", "--no-determinism-check"])
    assert rc == 0
    assert "incident export_failed (snapshot@50s) reproduced" in capsys.readouterr().out


def test_replay_refuses_to_write_over_its_capture(capture_path, capsys):
    path = str(capture_path("lease-expiry"))
    assert main(["replay", path, "--out", path]) == 2
    assert "--out must be another file" in capsys.readouterr().err


def test_sweep_serially_prints_the_table_and_writes_table_and_heatmap(tmp_path, capsys):
    rc = main(["sweep", "snapshot-outlasts-deadline", "--grid", "rollout_timeout_s=180,240",
               "--ray", "none", "--no-progress", "--out", str(tmp_path)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "2 point(s)" in text and "0 failed" in text
    assert (tmp_path / "sweep.csv").exists() and (tmp_path / "sweep.parquet").exists()
    assert (tmp_path / "heatmap-stranded.png").exists()


def test_sweep_with_an_unknown_grid_key_is_a_usage_error(tmp_path, capsys):
    rc = main(["sweep", "lost-reply", "--grid", "nonsense=1,2", "--ray", "none",
               "--out", str(tmp_path)])
    assert rc == 2
    assert "grid key 'nonsense' names no scenario field" in capsys.readouterr().err


def _incident(path, kind, run_id=None):
    with RunStore(path, read_only=True) as store:
        return store.query("SELECT incident_id FROM incidents WHERE kind = ? "
                           + ("AND run_id = ? " if run_id else "") + "ORDER BY start_ns LIMIT 1",
                           [kind, run_id] if run_id else [kind])[0][0]


def test_a_fix_replayed_on_a_window_judges_only_its_incidents_and_keeps_the_shard_kill(
        capture_path, tmp_path, capsys):
    path = capture_path("demo")
    p1 = _incident(path, "deadline_fired_while_parked")
    rc = main(["replay", str(path), "--incident", p1, "--variant",
               "pause-deadlines-during-snapshot", "--out", str(tmp_path / "w.duckdb"),
               "--report", str(tmp_path / "w.md"), "--no-determinism-check"])
    text = capsys.readouterr().out
    assert rc == 0
    # the shard-3 kill at 198 s acts in the window: a deadline fix does not cure the quarantine
    assert "incident quarantine (shard 3) reproduced" in text
    assert "incident deadline_fired_while_parked (p10000 try 0) vanished" in text
    # the stall at 821 s is outside the window: in no verdict
    assert "stall" not in text.split("-> run ")[1]
    assert "against the as-captured replay of the window" in text
    assert "last_span_end_s" not in text  # both sides end with the window
    report = (tmp_path / "w.md").read_text()
    assert "quarantine (shard 3): reproduced in the replay" in report
    assert "stall" not in report.split("## Notes")[0]


def test_a_fix_gets_no_verdict_where_the_as_captured_replay_misses_an_incident(
        capture_path, tmp_path, capsys):
    # the capture's record of its faults is gone (a live run that recorded no fault list):
    # the shard kill cannot be replayed, so the quarantine does not reproduce as captured
    path = tmp_path / "demo.duckdb"
    path.write_bytes(capture_path("demo").read_bytes())
    with RunStore(path) as store:
        (config,), = store.query("SELECT config FROM runs WHERE run_id = 'demo.s0'")
        config = {k: v for k, v in json.loads(config).items() if k != "faults"}
        store.register_run("demo.s0", source="live", config=config)
    p1 = _incident(path, "deadline_fired_while_parked")
    rc = main(["replay", str(path), "--incident", p1, "--variant",
               "pause-deadlines-during-snapshot", "--out", str(tmp_path / "w.duckdb"),
               "--report", str(tmp_path / "w.md"), "--no-determinism-check"])
    text = capsys.readouterr().out
    assert rc == 3
    assert "incident quarantine (shard 3) not reproduced as captured: no verdict" in text
    assert "quarantine (shard 3) vanished" not in text
    assert "NOT VALID" in text
    assert "quarantine (shard 3): not reproduced as captured: no verdict" in \
        (tmp_path / "w.md").read_text()


def _two_runs(tmp_path):
    path = tmp_path / "two.duckdb"
    with RunStore(path) as store:
        replay_into_store(get("snapshot-outlasts-deadline"), store, run_id="a")
        replay_into_store(get("lost-reply"), store, run_id="b")
    return path


def test_incidents_of_several_runs_are_listed_under_their_run(tmp_path, capsys):
    path = _two_runs(tmp_path)
    assert main(["incidents", str(path)]) == 0
    out = capsys.readouterr().out
    blocks = out.split("\n\n")
    assert blocks[0].startswith("run a: 2 incident(s)\n") and "deadline_fired" in blocks[0]
    assert blocks[1].startswith("run b: 2 incident(s)\n") and "stall" in blocks[1]
    assert "deadline_fired" not in blocks[1]
    assert main(["incidents", str(path), "--run-id", "b"]) == 0
    assert not capsys.readouterr().out.startswith("run ")  # one run: no heading


def test_replay_without_a_run_id_takes_the_incidents_run_or_names_the_flag(tmp_path, capsys):
    path = _two_runs(tmp_path)
    assert main(["replay", str(path), "--out", str(tmp_path / "x.duckdb")]) == 2
    err = capsys.readouterr().err
    assert "--run-id" in err and "(a, b)" in err
    stranded = _incident(path, "stranded_completion", "b")
    rc = main(["replay", str(path), "--incident", stranded, "--out", str(tmp_path / "y.duckdb"),
               "--no-determinism-check"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "extracted from run b " in out
    assert "incident stranded_completion (p00000-1 try 0) reproduced" in out
