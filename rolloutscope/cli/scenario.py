"""``rolloutscope scenario list`` and ``rolloutscope scenario run NAME --db PATH``."""

from __future__ import annotations

import argparse

from rolloutscope.cli import UsageError
from rolloutscope.cli.stores import STORE_HELP, store_arg
from rolloutscope.replay.errors import ReplayError


def cmd_list(args: argparse.Namespace) -> int:
    from rolloutscope.replay import scenarios

    width = max(len(n) for n in scenarios.names())
    for name in scenarios.names():
        print(f"{name:<{width}}  {scenarios.summary(name)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from rolloutscope.store import RunStore
    from rolloutscope.replay import scenarios
    from rolloutscope.replay.run_scenario import default_run_id, replay_into_store
    from rolloutscope.replay.variants import parse_variants

    try:
        scenario = scenarios.get(args.name)
        variants = parse_variants(args.variant or ())
        without = parse_variants(args.without or ())
    except ReplayError as exc:
        raise UsageError(str(exc)) from None
    seed = scenario.seed if args.seed is None else args.seed
    run_id = args.run_id or default_run_id(scenario.name, seed, variants, without)
    with RunStore(args.db) as store:
        if run_id in store.run_ids():
            raise UsageError(f"run {run_id} is already in {store.path}; pass --run-id")
        result = replay_into_store(scenario, store, variants=variants, without=without,
                                   seed=seed, run_id=run_id)
    print(f"run {result.run_id}: {result.spans:,} spans over {result.simulated_s:,.0f} "
          f"simulated s into {args.db}")
    stats = result.stats
    print(f"  committed {stats['committed']}, train steps {stats['train_steps']}, "
          f"snapshots {', '.join(stats['snapshots']) or '-'}, stall reports {stats['stalls']}")
    if result.raised:
        print(f"  the controller raised {result.raised}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    scenario = sub.add_parser("scenario", help="built-in incident scenarios: list, replay")
    ssub = scenario.add_subparsers(dest="scenario_command", metavar="ACTION", required=True)
    lst = ssub.add_parser("list", help="list the built-in scenarios")
    lst.set_defaults(handler=cmd_list)
    run = ssub.add_parser("run", help="replay a built-in scenario into a run store")
    run.add_argument("name", help="scenario name (see `rolloutscope scenario list`)")
    run.add_argument("--db", required=True, type=store_arg, help=STORE_HELP)
    run.add_argument("--variant", action="append", metavar="V",
                     help="turn a fix on (repeatable): pause-deadlines-during-snapshot, "
                          "counted-deadline-holders, retire-then-adopt, "
                          "calls-wait-at-closed-admission, fleet-health-enabled, "
                          "separate-reported-failure-streak, router-500-not-504, "
                          "probe-at-probe-interval")
    run.add_argument("--without", action="append", metavar="V",
                     help="take away a fix the scenario's system has (repeatable)")
    run.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    run.add_argument("--run-id", default=None, help="run id (default: NAME.sSEED+VARIANTS)")
    run.set_defaults(handler=cmd_run)
