"""``rolloutscope lake import|export|maintain``: moving runs between a file and a lake, and a
lake's upkeep (rolloutscope/store/lake_ops.py; docs/lakes.md)."""

from __future__ import annotations

import argparse
import time

from rolloutscope.cli import UsageError
from rolloutscope.cli.stores import STORE_HELP, add_data_path, store_arg, with_data_path
from rolloutscope.store.lake import LakeSpec


def _copy(args: argparse.Namespace, source, dest) -> int:
    from rolloutscope.store.lake_ops import copy_runs

    copied = copy_runs(source, dest, run_ids=args.run_id or None,
                       data_path=getattr(args, "data_path", None))
    print(f"copied {len(copied)} run(s) into {dest}: {', '.join(copied) or 'none'}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    if isinstance(args.file, LakeSpec) or not isinstance(args.lake, LakeSpec):
        raise UsageError("lake import takes a run file, then a lake (ducklake:...)")
    try:
        dest = with_data_path(args.lake, args)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(str(exc)) from None
    args.data_path = None  # applied to the spec
    return _copy(args, args.file, dest)


def cmd_export(args: argparse.Namespace) -> int:
    if not isinstance(args.lake, LakeSpec) or isinstance(args.file, LakeSpec):
        raise UsageError("lake export takes a lake (ducklake:...), then a run file")
    if args.file.exists():
        raise UsageError(f"{args.file} exists; export writes a new run file")
    return _copy(args, args.lake, args.file)


def cmd_maintain(args: argparse.Namespace) -> int:
    from rolloutscope.store import RunStore
    from rolloutscope.store.lake_ops import maintain

    retain_s = None if args.retain_hours is None else args.retain_hours * 3600.0
    retain_bytes = retain_bytes_of(args)
    keep_s = keep_snapshots_s_of(args)
    with RunStore(args.store) as store:
        while True:
            report = maintain(store, retain_s=retain_s, retain_bytes=retain_bytes,
                              keep_snapshots_s=keep_s)
            print(report.line(), flush=True)
            if args.every_s is None:
                return 0
            time.sleep(args.every_s)


def keep_snapshots_s_of(args: argparse.Namespace) -> float:
    from rolloutscope.store.errors import StoreError
    from rolloutscope.store.lake_ops import check_keep_snapshots

    keep_s = args.keep_snapshots_hours * 3600.0
    try:
        check_keep_snapshots(keep_s)
    except StoreError as exc:
        raise UsageError(f"--keep-snapshots-hours {args.keep_snapshots_hours:g}: {exc}") from None
    return keep_s


def retain_bytes_of(args: argparse.Namespace) -> int | None:
    """``--retain-gib`` in bytes, checked: a lake only, a positive size."""
    if args.retain_gib is None:
        return None
    if args.retain_gib <= 0:
        raise UsageError(f"--retain-gib must be positive, not {args.retain_gib}")
    store = getattr(args, "store", None) or getattr(args, "db", None)
    if not isinstance(store, LakeSpec):
        raise UsageError(f"--retain-gib is for a lake; {store} is a DuckDB file, which does "
                         f"not shrink when rows go (use --retain-hours)")
    return int(args.retain_gib * 2**30)


def add_upkeep_options(p: argparse.ArgumentParser, *, every_help: str) -> None:
    p.add_argument("--retain-hours", type=float, metavar="H",
                   help="drop rows older than H hours (retention; fractions allowed)")
    p.add_argument("--retain-gib", type=float, metavar="N",
                   help="a lake only: drop the oldest rows until the data files of its latest "
                        "snapshot hold under N GiB (fractions allowed)")
    p.add_argument("--keep-snapshots-hours", type=float, default=1.0, metavar="H",
                   help="expire lake snapshots older than H hours (default 1, at least one "
                        "minute): longer than the longest query, which reads the snapshot it "
                        "began on; a row's writer id is known while its snapshot is kept")
    p.add_argument("--every-s", "--maintain-every-s", dest="every_s", type=float,
                   metavar="S", help=every_help)


def register(sub: argparse._SubParsersAction) -> None:
    lake = sub.add_parser("lake", help="move runs between a file and a lake; lake upkeep")
    lsub = lake.add_subparsers(dest="lake_command", metavar="COMMAND", required=True)
    imp = lsub.add_parser("import", help="copy a finished run file's runs into a lake")
    imp.add_argument("file", type=store_arg, help="run file (.duckdb or run directory)")
    imp.add_argument("lake", type=store_arg, help="lake (ducklake:sqlite:… or "
                                                  "ducklake:postgres:…), created if missing")
    imp.add_argument("--run-id", action="append", help="only this run (repeatable)")
    add_data_path(imp)
    imp.set_defaults(handler=cmd_import)
    exp = lsub.add_parser("export", help="copy runs of a lake into a new run file")
    exp.add_argument("lake", type=store_arg, help="lake (ducklake:…)")
    exp.add_argument("file", type=store_arg, help="run file to create (.duckdb)")
    exp.add_argument("--run-id", action="append", help="only this run (repeatable)")
    exp.set_defaults(handler=cmd_export)
    mt = lsub.add_parser("maintain", help="retention and compaction of a store, once or on a "
                                          "timer, beside the writers")
    mt.add_argument("store", type=store_arg, help=STORE_HELP)
    add_upkeep_options(mt, every_help="repeat every S seconds until interrupted")
    mt.set_defaults(handler=cmd_maintain)
