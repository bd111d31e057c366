"""One table of flat config keys (``rolloutscope.config.FLAT_KEYS``): the run_thresholds view's
flat fallbacks and the replay's extractor both read a run's recorded config through it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from rolloutscope.config import FLAT_KEYS
from rolloutscope.replay import extract
from rolloutscope.replay.scenario import Config
from rolloutscope.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
THRESHOLDS = ROOT / "rolloutscope/store/sql/75_run_thresholds.sql"
# coalesce(config->>'$.section.name', config->>'$.flat_key') ... AS column: the nested key, else
# the flat one, as the view's column
PAIR = re.compile(r"config->>'\$\.(\w+)\.(\w+)',\s*config->>'\$\.(\w+)'"
                  r".*?\bAS (?!DOUBLE|INTEGER|BIGINT)(\w+)", re.DOTALL)


def _view_reads() -> dict[str, tuple[tuple[str, str], str]]:
    """flat key -> ((section, name), the view's column)."""
    return {flat: ((section, name), column) for section, name, flat, column
            in PAIR.findall(THRESHOLDS.read_text(encoding="utf-8"))}


def test_the_views_flat_fallbacks_are_the_tables():
    pairs = {flat: nested for flat, (nested, _) in _view_reads().items()}
    assert len(pairs) >= 9  # the pattern still finds the view's reads
    assert {flat: FLAT_KEYS.get(flat) for flat in pairs} == pairs


def test_every_flat_key_has_a_place_in_the_scenario_config():
    config = Config()
    for flat, (section, name) in FLAT_KEYS.items():
        block = getattr(config, section)
        assert name in {f.name for f in dataclasses.fields(block)}, flat


def _another(value, kind):
    if kind is int or (value is not None and isinstance(value, int)):
        return (value or 1) + 2
    return 2.0 * value if value else 7.0


@pytest.mark.parametrize("flat", sorted(FLAT_KEYS))
def test_a_flat_key_reaches_the_replay_and_the_views_alike(flat, tmp_path):
    section, name = FLAT_KEYS[flat]
    block = getattr(Config(), section)
    field = next(f for f in dataclasses.fields(block) if f.name == name)
    value = _another(getattr(block, name), int if "int" in str(field.type) else float)
    config = extract._config({flat: value}, extract._Notes())
    assert getattr(getattr(config, section), name) == value
    read = _view_reads()
    if flat not in read:
        return  # a key no threshold of the views needs
    column = read[flat][1]
    with RunStore(tmp_path / "run.duckdb") as store:
        store.register_run("imported", source="import", config={flat: value})
        got = store.query(f"SELECT {column} FROM run_thresholds WHERE run_id = 'imported'")
    assert got == [(value,)]
