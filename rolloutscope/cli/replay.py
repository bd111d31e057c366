"""``rolloutscope replay RUN.duckdb ... --out NEW.duckdb`` and ``rolloutscope sweep ...``.

Thin shell: argument parsing, opening files, printing. Exit codes: 0 done; 1 the replay
diverged from its capture (only with ``--fail-on-divergence``) or every grid point failed;
2 the user's input was wrong (printed in one line by the top-level CLI); 3 a replay with
variants whose comparison is not valid: the as-captured replay of the same run (or window) did
not reproduce every captured incident, and those incidents got no verdict.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rolloutscope.cli import UsageError
from rolloutscope.cli.stores import store_arg
from rolloutscope.store.lake import is_lake
from rolloutscope.replay.errors import ReplayError

VARIANT_HELP = ("turn a fix on (repeatable): pause-deadlines-during-snapshot, "
                "counted-deadline-holders, retire-then-adopt, calls-wait-at-closed-admission, ...")
PARTICIPANT_HELP = ("replay real code in place of a reference model (repeatable): KIND=nemo_rl "
                    "or KIND=nemo_gym (the upstream class, from --participant-path or "
                    "ROLLOUTSCOPE_NEMO_RL_SRC / ROLLOUTSCOPE_NEMO_GYM_SRC), KIND=module:Class, "
                    "KIND=module:factory or KIND=NAME of an entry point in group "
                    "rolloutscope.participants; KIND is fleet_health, router, deadline, "
                    "deadline_registry or agent_participant (docs/replaying-real-code.md)")
PATH_HELP = ("where the upstream code is (repeatable): nemo_rl=CHECKOUT or nemo_gym=CHECKOUT, a "
             "directory holding nemo_rl/ or nemo_gym/; 'doubles' for this project's stand-ins")


NOT_VALID = 3  # exit status: the variants' comparison is not valid (see the module's docstring)


def _backend_factory(args: argparse.Namespace):
    """The chosen generation backend as a factory (None: the captured timings), checked now so a
    wrong option or a missing extra is a one-line usage error before anything runs."""
    from rolloutscope.replay.backends import BackendError, make_backend

    if args.speed is not None and args.speed <= 0:
        raise UsageError("--speed must be positive")
    if args.backend == "recorded" and args.speed is not None:
        raise UsageError("--speed needs --backend openai or transformers (the recorded timings "
                         "replay on the virtual clock)")
    try:
        make_backend(args.backend, urls=args.backend_url or (), device=args.device)
        if args.backend == "transformers":
            from rolloutscope.replay.backends.transformers_engine import require_engine

            require_engine()
    except BackendError as exc:
        raise UsageError(str(exc)) from None
    if args.backend == "recorded":
        return None
    return lambda: make_backend(args.backend, urls=args.backend_url or (), device=args.device)


def cmd_replay(args: argparse.Namespace) -> int:
    from rolloutscope.store import RunStore
    from rolloutscope.replay import compare
    from rolloutscope.replay.replay_capture import ReplayOptions, capture_from_store, replay_run

    src, out = args.run, args.out
    if str(src) == str(out) or (isinstance(src, Path) and isinstance(out, Path)
                                and src.resolve() == out.resolve()):
        raise UsageError("--out must be another file than the captured run")
    backend = _backend_factory(args)
    try:
        from rolloutscope.replay.plugins import parse_paths

        paths = parse_paths(args.participant_path or ())
        capture = capture_from_store(src, args.run_id, incident_id=args.incident,
                                     pad_s=args.pad)
        result = replay_run(capture, out=out, variants=args.variant or (),
                            fail_on_divergence=False,
                            options=ReplayOptions(
                                participants=args.participant or (), participant_paths=paths,
                                check_determinism=not args.no_determinism_check,
                                compare_reference=not args.no_reference_comparison,
                                backend=backend, speed=args.speed or 1.0))
    except ReplayError as exc:
        raise UsageError(str(exc)) from None
    if capture.extraction is not None:
        for line in capture.extraction.lines():
            # what a window left out is said however it was found
            if not line.startswith("inferred") or line.startswith("inferred: window: left"):
                print(line)
    for line in result.lines():
        print(line)
    if result.error is not None:
        return 1
    if args.report:
        with RunStore(src, read_only=True) as before, RunStore(out, read_only=True) as after:
            cmp = compare.compare_runs(before, capture.run_id or "", after, result.run_id,
                                       verdicts=result)
            notes = tuple(result.lines()[1:]) + tuple(
                capture.extraction.lines() if capture.extraction else ())
            path = compare.write_report(cmp, args.report, notes=notes)
        print(f"report: {path}")
    if not result.comparison_valid:
        return NOT_VALID
    return 1 if args.fail_on_divergence and result.diverged else 0


def _load_scenario(target: str, run_id: str | None):
    from rolloutscope.store import RunStore
    from rolloutscope.replay import scenarios
    from rolloutscope.replay.extract import extract_scenario
    from rolloutscope.replay.replay_capture import capture_from_golden
    from rolloutscope.replay.scenario import Scenario

    path = Path(target)
    if path.suffix == ".duckdb" or path.is_dir() or is_lake(target):
        with RunStore(target if is_lake(target) else path, read_only=True) as store:
            return extract_scenario(store, run_id).scenario
    if path.suffix == ".json":
        text = path.read_text(encoding="utf-8")
        if '"rolloutscope-golden-capture"' in text:
            return capture_from_golden(path).scenario
        return Scenario.from_json(text)
    return scenarios.get(target)


def cmd_sweep(args: argparse.Namespace) -> int:
    from rolloutscope.replay.sweep import heatmap_png, parse_grid, run_sweep, write_table
    from rolloutscope.replay.variants import parse_variants

    try:
        scenario = _load_scenario(args.target, args.run_id)
        grid = parse_grid(args.grid or ())
        variants = [v.value for v in parse_variants(args.variant or ())]
        result = run_sweep(scenario, grid, out_dir=args.out, variants=variants, ray=args.ray,
                           num_cpus=args.num_cpus, progress=not args.no_progress)
        csv, parquet = write_table(result)
        png = heatmap_png(result, args.metric, Path(args.out) / f"heatmap-{args.metric}.png")
    except ReplayError as exc:
        raise UsageError(str(exc)) from None
    shown = result.table.drop(columns=["run_file"])
    print(shown.to_string(index=False))
    print(f"{len(result.table)} point(s) in {result.wall_s:.2f} s ({result.executor}); "
          f"{len(result.failures)} failed")
    print(f"table: {csv}, {parquet}")
    print(f"heatmap: {png}")
    return 1 if len(result.failures) == len(result.table) else 0


def register(sub: argparse._SubParsersAction) -> None:
    rp = sub.add_parser("replay", help="re-execute a captured run (or one incident) and diff it")
    rp.add_argument("run", type=store_arg,
                    help="the captured run store (.duckdb file, run directory or lake)")
    rp.add_argument("--run-id", help="which run of the store (needed if it holds several)")
    rp.add_argument("--incident", metavar="ID",
                    help="replay a window around this incident (ids: rolloutscope incidents)")
    rp.add_argument("--pad", type=float, default=None, metavar="S",
                    help="seconds of history around the incident (default: the larger of "
                         "prepare_timeout_s and rollout_timeout_s)")
    rp.add_argument("--variant", action="append", metavar="V", help=VARIANT_HELP)
    rp.add_argument("--participant", action="append", metavar="KIND=REF",
                    help=PARTICIPANT_HELP)
    rp.add_argument("--participant-path", action="append", metavar="NAME=PATH",
                    help=PATH_HELP)
    rp.add_argument("--no-reference-comparison", action="store_true",
                    help="with plugged participants, skip replaying the reference models to "
                         "report where the runs part")
    rp.add_argument("--out", required=True, type=store_arg,
                    help="run store to write the replay into (a file or a lake)")
    rp.add_argument("--report", metavar="PATH", help="write a comparison report (.md or .html)")
    rp.add_argument("--no-determinism-check", action="store_true",
                    help="skip the second run that checks the replay is deterministic")
    rp.add_argument("--fail-on-divergence", action="store_true",
                    help="exit 1 when the replay does not reproduce its capture")
    rp.add_argument("--backend", choices=("recorded", "openai", "transformers"),
                    default="recorded",
                    help="who serves the model calls: the captured timings on the virtual clock "
                         "(default), an OpenAI-compatible server per shard, or an in-process "
                         "engine with a small random model (rolloutscope[engine]); the last two "
                         "replay in wall-clock time")
    rp.add_argument("--backend-url", action="append", metavar="URL",
                    help="an OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 "
                         "(repeatable: one per generation shard, in shard order)")
    rp.add_argument("--device", choices=("cuda", "cpu"),
                    help="where the transformers backend runs (default: cuda when available)")
    rp.add_argument("--speed", type=float, metavar="X",
                    help="wall-clock replay at X times real time (default 1; a real engine's "
                         "latency counts X times in the replay's clock)")
    rp.set_defaults(handler=cmd_replay)

    sw = sub.add_parser("sweep", help="replay a scenario or a captured run over a grid")
    sw.add_argument("target", metavar="SCENARIO_OR_RUN",
                    help="a built-in scenario name, a scenario/golden .json, or a run store")
    sw.add_argument("--run-id", help="which run of a store holding several")
    sw.add_argument("--grid", action="append", metavar="KEY=v1,v2,...",
                    help="an axis (repeatable), e.g. rollout_timeout_s=120,180,240 or "
                         "snapshot_duration_s=30,60,90")
    sw.add_argument("--variant", action="append", metavar="V", help=VARIANT_HELP)
    sw.add_argument("--ray", default="local", metavar="ADDRESS|local|none",
                    help="run the points as Ray tasks on a local Ray (default), a cluster "
                         "address, or serially in this process (none)")
    sw.add_argument("--num-cpus", type=int, default=None,
                    help="CPUs for a local Ray (default: all)")
    sw.add_argument("--metric", default="stranded",
                    help="what the heatmap shows (an outcome column; default stranded)")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.add_argument("--out", required=True, help="directory for run files, table and heatmap")
    sw.set_defaults(handler=cmd_sweep)
