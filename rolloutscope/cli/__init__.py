"""The ``rolloutscope`` command line.

Each package contributes its subcommands through a ``register(subparsers)`` function in the
module named in ``COMMAND_MODULES``; a handler returns the process exit code. Errors that are the
user's (a bad path, a file that is not a run store) print one line and exit 2; they never print
a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rolloutscope import __version__
from rolloutscope.errors import InputError

# Modules that add subcommands, in help order.
COMMAND_MODULES: tuple[str, ...] = (
    "rolloutscope.cli.info_incidents",
    "rolloutscope.cli.serve",
    "rolloutscope.cli.lake",
    "rolloutscope.cli.imports",
    "rolloutscope.cli.dashboard",
    "rolloutscope.cli.scenario",
    "rolloutscope.cli.replay",
    "rolloutscope.cli.demo",
    "rolloutscope.cli.doctor",
    "rolloutscope.cli.export",
    "rolloutscope.cli.diff",
    "rolloutscope.cli.steps",
    "rolloutscope.cli.why",
)


# Each subcommand's module: a command line names one, and only that module (with what it
# imports) is loaded; `--help`, `--version` or an unknown word load them all. Held to the
# modules' own register() by tests/test_cli_startup.py.
COMMANDS: dict[str, str] = {
    "info": "rolloutscope.cli.info_incidents", "incidents": "rolloutscope.cli.info_incidents",
    "serve": "rolloutscope.cli.serve", "lake": "rolloutscope.cli.lake",
    "import": "rolloutscope.cli.imports", "follow": "rolloutscope.cli.imports",
    "dashboard": "rolloutscope.cli.dashboard", "scenario": "rolloutscope.cli.scenario",
    "replay": "rolloutscope.cli.replay", "sweep": "rolloutscope.cli.replay",
    "demo": "rolloutscope.cli.demo", "doctor": "rolloutscope.cli.doctor",
    "export": "rolloutscope.cli.export", "diff": "rolloutscope.cli.diff",
    "steps": "rolloutscope.cli.steps", "why": "rolloutscope.cli.why",
}


class UsageError(InputError):
    """A problem with an option on the command line; printed without a traceback."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser; given ``argv``, with only the subcommand it names (the
    others' modules are not imported: `rolloutscope info` need not load the dashboard)."""
    parser = argparse.ArgumentParser(
        prog="rolloutscope",
        description="Observability and replay workbench for large RL training runs.")
    parser.add_argument("--version", action="version", version=f"rolloutscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    words = [a for a in (argv or ()) if not a.startswith("-")]
    if words and words[0] in COMMANDS and not any(a in ("-h", "--help", "--version")
                                                  for a in argv[:argv.index(words[0])]):
        importlib.import_module(COMMANDS[words[0]]).register(sub)
        return parser
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:  # answered before any command's module loads
        print(f"rolloutscope {__version__}")
        return 0
    from rolloutscope.store.errors import StoreError

    parser = build_parser(argv)
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except (InputError, StoreError, FileNotFoundError) as exc:
        print(f"rolloutscope {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
