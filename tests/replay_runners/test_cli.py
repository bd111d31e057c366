"""``rolloutscope replay`` and ``rolloutscope sweep`` as a user runs them."""

from __future__ import annotations

import json

from rolloutscope.cli import main
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
