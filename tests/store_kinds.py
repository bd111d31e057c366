"""The two kinds of run store every contract test runs against: a DuckDB file and a DuckLake
with an SQLite catalog (PostgreSQL-catalog lakes: tests/lake/, where a server can start).

``store_target(kind, tmp_path)`` names a fresh store of that kind; test modules parametrise
their store fixture with ``STORE_KINDS`` instead of copying tests per kind.
"""

from __future__ import annotations

from pathlib import Path

STORE_KINDS = ("file", "lake-sqlite")


def store_target(kind: str, tmp_path: Path, name: str = "run") -> Path | str:
    if kind == "file":
        return tmp_path / f"{name}.duckdb"
    if kind == "lake-sqlite":
        return f"ducklake:sqlite:{tmp_path / name}.sqlite"
    raise ValueError(f"unknown store kind {kind!r}; known: {', '.join(STORE_KINDS)}")
