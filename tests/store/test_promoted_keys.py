"""One table of promoted span keys (``fit.PROMOTED``): the row builder, the compiled decoder
and encoder (their key lists and their C enums), the store's schema and the views are held to
it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rolloutscope.collectors import exporter
from rolloutscope.collectors.otlp import fastdecode
from rolloutscope.store import rows
from rolloutscope.store.fit import COPIED, INDEXED_KEYS, PROMOTED, ROW_KEYS
from rolloutscope.store.schema import BATCH_TABLES
from rolloutscope.vocabulary import Attr

ROOT = Path(__file__).resolve().parents[2]
SQL = ROOT / "rolloutscope/store/sql"
# the copied columns' keys in the compiled decoder's order
COPIED_KEYS = tuple(key for copy in COPIED for key in copy.keys)
# rows.promoted's answer, in its order
PROMOTED_COLUMNS = ("rollout_id", "attempt", "prompt_idx", "checkpoint_id", "participant_kind",
                    "shard_idx")


def _enum(path: Path, last: str) -> list[str]:
    """The names of the C enum of ``path`` that ends with ``last``."""
    text = path.read_text(encoding="utf-8")
    m = re.search(r"enum\s*\{([^}]*\b" + last + r")\s*\}", text)
    assert m, f"{path.name}: no enum ending {last}"
    return [n.strip() for n in m.group(1).split(",")][:-1]


def test_the_table_names_each_key_once_and_indexes_the_span_keys_first():
    assert len({r.key for r in PROMOTED}) == len(PROMOTED)
    ons = [r.on for r in PROMOTED if r.index]
    assert ons == ["span"] * ons.count("span") + ["resource"] * ons.count("resource")
    assert ROW_KEYS == INDEXED_KEYS[:len(ROW_KEYS)]


def test_the_compiled_decoders_enum_is_the_tables():
    names = _enum(ROOT / "collectors/otlp/_fastdecode.c", "N_KEYS")
    assert names[:len(INDEXED_KEYS)] == [r.index for r in PROMOTED if r.index]
    assert len(names) == len(INDEXED_KEYS) + len(COPIED_KEYS)
    assert fastdecode._KEYS == (*INDEXED_KEYS, *COPIED_KEYS)


def test_the_compiled_encoders_enum_is_the_tables():
    names = _enum(ROOT / "collectors/_fastencode.c", "N_ROW_KEYS")
    assert names == [r.index for r in PROMOTED if r.index and r.on == "span"]
    assert [k for k, i in sorted(exporter._ENCODE_KEYS.items(), key=lambda kv: kv[1])
            if i < len(names)] == list(ROW_KEYS)


@pytest.mark.parametrize("rule", [r for r in PROMOTED if r.column in PROMOTED_COLUMNS],
                         ids=lambda r: r.key)
def test_the_row_builder_promotes_each_key_of_the_table(rule):
    value = "x" if rule.sql == "VARCHAR" else 7
    got = rows.promoted({rule.key: value})
    assert got[PROMOTED_COLUMNS.index(rule.column)] == value
    assert rule.key in rows._ROW_KEYS


def test_the_schema_gives_each_promoted_column_the_tables_type():
    types = {}
    for table, columns in BATCH_TABLES.items():
        for name, sql, _ in columns:
            types.setdefault(name, {})[table] = sql
    for rule in PROMOTED:
        assert rule.column in types, rule
        assert set(types[rule.column].values()) == {rule.sql}, (rule, types[rule.column])
    spans = {name for name, _, _ in BATCH_TABLES["spans"]}
    assert {r.column for r in PROMOTED if r.key != Attr.METRIC_STEP} <= spans


def test_a_view_reads_a_promoted_key_from_the_json_only_where_no_column_holds_it():
    # a column holds the key's value when the key has the column to itself and every table
    # with attributes has the column; else (a shared attempt column, an event's participant
    # kind) the view reads the JSON
    shared = {r.column for r in PROMOTED if [s.column for s in PROMOTED].count(r.column) > 1}
    with_attributes = [{n for n, _, _ in cols} for cols in BATCH_TABLES.values()
                       if any(n == "attributes" for n, _, _ in cols)]
    held = {r.key for r in PROMOTED if r.column not in shared
            and all(r.column in cols for cols in with_attributes)}
    read = re.compile(r"attributes\s*->>\s*'(?:\$\.)?\"?([\w.]+)\"?'")
    found = [(p.name, key) for p in sorted(SQL.glob("*.sql"))
             for key in read.findall(p.read_text(encoding="utf-8"))]
    assert ("38_gym_rollouts.sql", Attr.RL_ATTEMPT) in found  # the pattern finds the reads
    assert [(name, key) for name, key in found if key in held] == []
