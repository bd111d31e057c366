from __future__ import annotations

import json
from pathlib import Path

import pytest

from rolloutscope.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
CONTROLLER_LOG = FIXTURES / "controller.log"
UNTIMED_LOG = FIXTURES / "controller_no_timestamps.log"
METRICS_JSONL = FIXTURES / "metrics.jsonl"
OTLP_JSONL = FIXTURES / "gym_telemetry.otlp.jsonl"


def run_import(capsys, kind: str, *files, db: Path, **options) -> dict:
    """``rolloutscope import`` through the real CLI; returns its JSON report."""
    argv = ["import", kind, *map(str, files), "--db", str(db), "--json"]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def incidents(capsys, db: Path) -> list[dict]:
    capsys.readouterr()
    assert main(["incidents", str(db), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "run.duckdb"
