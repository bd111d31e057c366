"""``rolloutscope doctor gym``: why a Gym deployment sends no telemetry, and what to do.

Thin shell over ``rolloutscope.collectors.gym_compat.doctor``. Exit codes: 0 Gym would export
(and, with --endpoint, the probe span arrived); 1 it would not, with each problem and its fix
printed; 2 the options were wrong.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rolloutscope.cli import UsageError


def cmd_doctor_gym(args: argparse.Namespace) -> int:
    from rolloutscope.collectors.gym_compat import doctor

    python = args.python or doctor.gym_python()
    if python is None:
        raise UsageError("no `gym` command on PATH to find the Gym environment by: pass the "
                         "Gym environment's interpreter with --python")
    if args.write_shim_dir:
        for path in doctor.write_shim_dir(Path(args.write_shim_dir)):
            print(f"wrote {path}")
        print(f"export PYTHONPATH={Path(args.write_shim_dir).resolve()}${{PYTHONPATH:+:"
              f"$PYTHONPATH}} before `gym env start`: Gym passes its environment to every "
              f"server it starts, whichever environment that server runs from")
        return 0
    if args.install_shim or args.remove_shim:
        report = doctor.run_probe(python, span_groups=args.span_groups)
        if args.install_shim:
            for path in doctor.install_shim(report):
                print(f"installed {path}")
        else:
            for path in doctor.remove_shim(report):
                print(f"removed {path}")
    diagnosis = doctor.examine(python, span_groups=args.span_groups, endpoint=args.endpoint,
                               protocol=args.protocol)
    if args.json:
        print(json.dumps({"healthy": diagnosis.healthy, "arrived": diagnosis.arrived,
                          "findings": [f.__dict__ for f in diagnosis.findings],
                          "report": diagnosis.report}, indent=2, default=str))
    else:
        for line in diagnosis.lines():
            print(line)
    return 0 if diagnosis.healthy else 1


def register(sub: argparse._SubParsersAction) -> None:
    doc = sub.add_parser("doctor", help="check a deployment's telemetry set-up")
    what = doc.add_subparsers(dest="doctor_what", metavar="WHAT")
    gym = what.add_parser(
        "gym", help="why a NeMo-Gym environment exports nothing, and the fix",
        description="Run a probe in the Gym environment (its own interpreter): nemo-gym and "
                    "nemo-lens versions, whether nemo-lens has what Gym imports, whether the "
                    "span groups resolve, the OTEL_* / NEMO_GYM_OTEL_* environment, and with "
                    "--endpoint whether a span sent through Gym's telemetry reaches that "
                    "collector. Exit 1 when Gym would export nothing.")
    gym.add_argument("--python", help="the Gym environment's interpreter (default: the one "
                                      "the `gym` command on PATH runs)")
    gym.add_argument("--span-groups", default="per_rollout",
                     help="Gym's telemetry.span_groups (default per_rollout)")
    gym.add_argument("--endpoint", help="send a probe span to this OTLP endpoint, e.g. "
                                        "http://127.0.0.1:4318 (rolloutscope serve)")
    gym.add_argument("--protocol", default="http/protobuf", choices=("http/protobuf", "grpc"),
                     help="OTLP protocol for --endpoint (default http/protobuf)")
    gym.add_argument("--install-shim", action="store_true",
                     help="install the compatibility shim into that environment, then check")
    gym.add_argument("--remove-shim", action="store_true",
                     help="remove the shim from that environment, then check")
    gym.add_argument("--write-shim-dir", metavar="DIR",
                     help="write the shim and a sitecustomize.py into DIR, for PYTHONPATH")
    gym.add_argument("--json", action="store_true", help="print the findings as JSON")
    gym.set_defaults(handler=cmd_doctor_gym)
    doc.set_defaults(handler=lambda args: (doc.print_help(), 2)[1])
