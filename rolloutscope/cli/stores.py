"""The store argument every command takes: a DuckDB run file (or run directory) or a lake.

``store_arg`` is the argparse ``type`` of ``--db`` and of positional run arguments: a lake
name (``ducklake:sqlite:PATH`` or ``ducklake:postgres:CONNINFO``) is checked here, so a bad one
is a one-line usage error naming what was wrong; anything else is a path, as before.
``add_data_path`` adds ``--data-path`` to commands that may create a lake.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rolloutscope.store.lake import LakeSpec, LakeSpecError, is_lake, parse

STORE_HELP = ("run store: a .duckdb file, a run directory, or a lake "
              "(ducklake:sqlite:PATH/catalog.sqlite or ducklake:postgres:'dbname=… host=…')")


def store_arg(text: str) -> Path | LakeSpec:
    if is_lake(text):
        try:
            return parse(text)
        except LakeSpecError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return Path(text)


def add_data_path(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-path", metavar="DIR",
        help="where a new lake keeps its Parquet data files (default: beside an sqlite "
             "catalog, in CATALOG_data/; a postgres lake needs one every writer can reach)")


def with_data_path(store: Path | LakeSpec, args: argparse.Namespace) -> Path | LakeSpec:
    """The store with ``--data-path`` applied (a file store takes none)."""
    data_path = getattr(args, "data_path", None)
    if data_path is None:
        return store
    if not isinstance(store, LakeSpec):
        raise argparse.ArgumentTypeError(
            f"--data-path is for a lake; {store} is a DuckDB file")
    return store.with_data_path(Path(data_path).expanduser().resolve()
                                if "://" not in data_path else data_path)
