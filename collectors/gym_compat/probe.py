"""What a Gym environment's telemetry would do: run inside it, report JSON on stdout.

Standalone (standard library, then whatever the Gym environment has): ``rolloutscope doctor
gym`` runs ``PYTHON probe.py --span-groups SPEC [--endpoint URL --protocol P --token T]`` with
the Gym environment's interpreter and reads the last line of stdout. It initialises Gym's
telemetry the way a Gym server does (``nemo_gym.telemetry.setup.init_telemetry``, with
telemetry switched on and the given span groups), records every log line Gym, nemo-lens and
the OTLP exporter write at any level (the trap speaks only at DEBUG), and with an endpoint
sends one span, named ``rolloutscope.doctor.probe`` and carrying the token, through the
providers Gym set up. It never raises: every failure is a fact in the report.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import sysconfig
import traceback

PROBE_SPAN = "rolloutscope.doctor.probe"
TOKEN_ATTR = "rolloutscope.doctor.token"
ENV_PREFIXES = ("OTEL_", "NEMO_GYM_OTEL_", "NEMO_LENS_")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            message += f" [{type(record.exc_info[1]).__name__}: {record.exc_info[1]}]"
        self.lines.append({"level": record.levelname, "logger": record.name,
                           "message": message[:2000]})


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _attempt(report: dict, key: str, fn) -> object:
    try:
        return fn()
    except BaseException as exc:  # noqa: BLE001 - a fact to report, whatever it is
        report.setdefault("errors", {})[key] = f"{type(exc).__name__}: {exc}"
        return None


def probe(args: argparse.Namespace) -> dict:
    env_before = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    report: dict = {
        "python": sys.version.split()[0], "executable": sys.executable,
        "purelib": sysconfig.get_paths()["purelib"], "env": env_before,
        "nemo_gym": _version("nemo-gym"), "nemo_lens": _version("nemo-lens"),
        "opentelemetry_sdk": _version("opentelemetry-sdk"),
        "shim_loaded": "nemo_lens_gym070_compat" in sys.modules,
    }
    records = _Records()
    root = logging.getLogger()
    root.addHandler(records)
    root.setLevel(logging.DEBUG)
    # telemetry on, as `telemetry: {enabled: true}` makes Gym's orchestrator set it; the rest
    # from the caller's environment, or the doctor's options
    os.environ["NEMO_GYM_OTEL_ENABLED"] = "1"
    os.environ["NEMO_GYM_OTEL_SPAN_GROUPS"] = args.span_groups
    os.environ["NEMO_GYM_OTEL_METRICS_ENABLED"] = "0"  # no periodic exports from a probe
    os.environ.setdefault("NEMO_GYM_OTEL_RUN_ID", args.run_id)
    if args.endpoint:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = args.endpoint
        os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = args.protocol
    elif not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        # nowhere to send to: the console exporter shows whether a span would be made
        os.environ["NEMO_GYM_OTEL_EXPORTER"] = "console"
    if report["nemo_gym"] is None:
        report["records"] = records.lines
        return report

    def orchestrator_env() -> bool:
        # what `gym env start` does with a `telemetry: {enabled: true, ...}` block before it
        # starts a server: the same setdefault calls, so what the caller set still wins
        from nemo_gym.telemetry.config import TelemetryConfig
        from nemo_gym.telemetry.setup import configure_telemetry_env

        configure_telemetry_env(TelemetryConfig(enabled=True, span_groups=args.span_groups,
                                                metrics_enabled=False))
        return True

    report["orchestrator_env"] = bool(_attempt(report, "orchestrator_env", orchestrator_env))

    def names() -> dict:
        import nemo.lens.groups as groups
        import nemo.lens.semconv as semconv

        shim = sys.modules.get("nemo_lens_gym070_compat")
        patched = sorted(getattr(shim, "PATCHED", ())) if shim is not None else []
        return {"NV_DL_RANK": hasattr(semconv, "NV_DL_RANK"),
                "NV_DL_WORLD_SIZE": hasattr(semconv, "NV_DL_WORLD_SIZE"),
                "SpanRegistry": hasattr(groups, "SpanRegistry"), "patched_by_shim": patched}

    report["lens_names"] = _attempt(report, "lens_names", names)

    def gym_resolve() -> list:
        from nemo_gym.telemetry.span_groups import GymSpanGroup

        return sorted(GymSpanGroup.resolve(args.span_groups))

    def lens_resolve() -> list:
        import nemo_gym.telemetry.span_groups  # noqa: F401 - registers Gym's groups first
        from nemo.lens.groups import SpanGroup

        return sorted(SpanGroup.resolve(args.span_groups))

    report["gym_resolve"] = _attempt(report, "gym_resolve", gym_resolve)
    report["lens_resolve"] = _attempt(report, "lens_resolve", lens_resolve)

    def init() -> dict:
        from nemo_gym.telemetry.setup import init_telemetry

        handle = init_telemetry(server_name="rolloutscope_doctor",
                                server_type="resources_servers")
        return {"handle": handle is not None,
                "exporting": bool(getattr(handle, "is_exporting", False))}

    report["init"] = _attempt(report, "init", init) or {"handle": False, "exporting": False}

    def enabled() -> list:
        from nemo_gym.telemetry._fallbacks import is_span_group_enabled
        from nemo_gym.telemetry.span_groups import GymSpanGroup

        return sorted(g for g in GymSpanGroup.ALL_GROUPS if is_span_group_enabled(g))

    report["enabled_groups"] = _attempt(report, "enabled_groups", enabled) or []

    def send() -> bool:
        from opentelemetry import trace

        tracer = trace.get_tracer("rolloutscope.doctor")
        with tracer.start_as_current_span(PROBE_SPAN, attributes={TOKEN_ATTR: args.token}):
            pass
        from nemo_gym.telemetry.setup import shutdown_telemetry

        shutdown_telemetry()  # flushes the exporter: its failures are logged now
        return True

    if report["init"].get("exporting") and (args.endpoint or args.token):
        report["sent"] = bool(_attempt(report, "send", send))
    report["records"] = records.lines
    return report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--span-groups", default="per_rollout")
    parser.add_argument("--endpoint", default=None)
    parser.add_argument("--protocol", default="http/protobuf")
    parser.add_argument("--token", default="")
    parser.add_argument("--run-id", default="rolloutscope-doctor")
    args = parser.parse_args()
    try:
        report = probe(args)
    except BaseException:  # noqa: BLE001 - the doctor reads whatever happened
        report = {"crashed": traceback.format_exc()[-4000:]}
    sys.stdout.flush()
    print("\n" + json.dumps(report, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
