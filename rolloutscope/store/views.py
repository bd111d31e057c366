"""The store's SQL views: the contract between collectors, dashboard, notebooks and replay.

Each view is one file in ``sql/``, named ``NN_<view>.sql`` (NN orders creation, since later views
read earlier ones) and headed by a comment saying what the view means. A writable store persists
the views in the file, with a digest of their text; a read-only open of a file whose persisted
views differ from this version's creates them as temporary views that shadow the stored ones, so
readers always see the current definitions.

A file may define, before its view, the table macro ``<view>_of(run, floor_ns)``: the view's
rows of one run (NULL: every run) that start at or after ``floor_ns`` (NULL: all), computed from
there on, so that a read of a long run's latest rows does not compute the view over the whole
run first (a filter on a view's output does not reach the spans its aggregates read). The view
is then ``SELECT * FROM <view>_of(NULL, NULL)``.

A view whose rows each group several events may instead define ``<view>_since(run, since_ns)``:
the view's rows of one run that an event at or after ``since_ns`` reached, grouped from those
rows' events only. A live dashboard tick reads it for the rows that changed since its last read;
a filter on the view's output times would group every row of the run first (``completions`` at
10M spans: 0.4-0.7 s a tick, against a few ms). The view is then
``SELECT * FROM <view>_since(NULL, NULL)``.

A view of what is in flight now may define ``<view>_window(run, floor_ns, rows_back)``: the
view's rows of one run read from the open markers and the finished spans and events of a recent
window only (those ending at or after ``floor_ns`` and, where ``rows_back`` is positive, among
the last ``rows_back`` committed), so a live reader's cost follows what is in flight, not the
run. The view is then ``SELECT * FROM <view>_window(NULL, NULL, 0)``.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache
from importlib import resources

import duckdb

_NAME = re.compile(r"^\d\d_([a-z_]+)\.sql$")
MACRO_SUFFIXES = ("_of", "_since", "_window")  # the macros a view file may define beside it
_CREATE = re.compile(r"CREATE\s+OR\s+REPLACE\s+VIEW\s+([a-z_]+)\s+AS", re.IGNORECASE)
_MACRO = re.compile(r"CREATE\s+OR\s+REPLACE\s+MACRO\s+([a-z_]+)\s*\(", re.IGNORECASE)


@cache
def definitions() -> tuple[tuple[str, str], ...]:
    """(view name, SQL text) in creation order."""
    return read_folder(resources.files("rolloutscope.store") / "sql")


def read_folder(folder) -> tuple[tuple[str, str], ...]:
    """(view name, SQL text) of a folder of view files, in creation order."""
    out = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        m = _NAME.match(entry.name)
        if not m:
            continue
        text = entry.read_text()
        declared = _CREATE.search(text)
        if not declared or declared.group(1) != m.group(1):
            raise RuntimeError(f"{entry.name} must define exactly the view {m.group(1)}")
        allowed = {f"{m.group(1)}{suffix}" for suffix in MACRO_SUFFIXES}
        if any(name not in allowed for name in _MACRO.findall(text)):
            raise RuntimeError(f"{entry.name} may define only the macros "
                               + ", ".join(f"{m.group(1)}{s}" for s in MACRO_SUFFIXES))
        out.append((m.group(1), text))
    return tuple(out)


def names() -> frozenset[str]:
    return frozenset(name for name, _ in definitions())


@cache
def readers() -> frozenset[str]:
    """The views read through their ``<view>_of(run, floor_ns)`` macro."""
    return _with_macro("_of")


@cache
def incremental() -> frozenset[str]:
    """The views a live tick reads through their ``<view>_since(run, since_ns)`` macro."""
    return _with_macro("_since")


def _with_macro(suffix: str) -> frozenset[str]:
    return frozenset(name for name, text in definitions()
                     if f"{name}{suffix}" in _MACRO.findall(text))


def as_temporary(text: str) -> str:
    """A view file's text, its macro and its view made temporary (a connection's own)."""
    text = _MACRO.sub(lambda m: f"CREATE OR REPLACE TEMP MACRO {m.group(1)}(", text)
    return _CREATE.sub(lambda m: f"CREATE OR REPLACE TEMP VIEW {m.group(1)} AS", text, 1)


def in_schema(text: str, schema: str) -> str:
    """A view file's text, its macro and its view created in ``schema``: their unqualified
    names then read that schema's tables and views first, the main schema's after."""
    text = _MACRO.sub(lambda m: f"CREATE OR REPLACE MACRO {schema}.{m.group(1)}(", text)
    return _CREATE.sub(lambda m: f"CREATE OR REPLACE VIEW {schema}.{m.group(1)} AS", text, 1)


def digest() -> str:
    h = hashlib.sha256()
    for name, text in definitions():
        h.update(name.encode())
        h.update(text.encode())
    return h.hexdigest()[:16]


def installed_current(con: duckdb.DuckDBPyConnection) -> bool:
    rows = con.execute("SELECT value FROM store_meta WHERE key = 'views_digest'").fetchall()
    return bool(rows) and rows[0][0] == digest()


# a window's bound by row id (``in_flight_window``): row ids are a table's, and an older store's
# tables are read through views that have none
_ROW_ID_BOUND = re.compile(r"\s*AND rowid >= CASE WHEN rows_back > 0 THEN \(SELECT count\(\*\) "
                           r"FROM \w+\) - rows_back\s+ELSE 0 END")


def without_row_ids(text: str) -> str:
    """A view file's text without its bounds by row id: the time window alone bounds it."""
    return _ROW_ID_BOUND.sub("", text)


def install(con: duckdb.DuckDBPyConnection, *, temporary: bool, row_ids: bool = True) -> None:
    """The views, stored or temporary; ``row_ids`` False where the tables are views of an
    older store's (``schema.legacy_views``), which have no row ids."""
    for _, text in definitions():
        text = text if row_ids else without_row_ids(text)
        con.execute(as_temporary(text) if temporary else text)
    if not temporary:
        # delete-then-insert, not INSERT OR REPLACE: a lake's store_meta has no key to replace on
        con.execute("DELETE FROM store_meta WHERE key = 'views_digest'")
        con.execute("INSERT INTO store_meta VALUES ('views_digest', ?)", [digest()])
