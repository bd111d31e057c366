"""``rolloutscope doctor gym``'s core: why a Gym environment exports nothing, and the fix.

``examine`` runs ``probe.py`` with the Gym environment's interpreter, and ``diagnose`` turns its
report into findings, each saying what is wrong and what to do; ``healthy`` is False when Gym
would export nothing. ``install_shim`` / ``remove_shim`` put the compatibility shim into that
environment's site-packages (or take it out). Where an endpoint is given, ``examine`` sends a
probe span through Gym's own telemetry set-up and, when the endpoint is a rolloutscope
collector, asks it whether the span arrived.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolloutscope.collectors.gym_compat import PTH_NAME, SHIM_MODULE, packaged
from rolloutscope.errors import InputError

PROBE_TIMEOUT_S = 180.0
ARRIVAL_WAIT_S = 15.0
TRAP_MESSAGE = "nemo-lens is not installed; telemetry stays disabled"


class DoctorInputError(InputError):
    """The interpreter or the endpoint the doctor was given cannot be used."""


@dataclass(frozen=True, kw_only=True)
class Finding:
    level: str  # ok | problem | note
    what: str
    fix: str = ""


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    report: dict[str, Any]
    findings: tuple[Finding, ...]
    arrived: bool | None = None  # the probe span reached the collector (None: not asked)

    @property
    def healthy(self) -> bool:
        return not any(f.level == "problem" for f in self.findings)

    def lines(self) -> list[str]:
        r = self.report
        out = [f"Gym environment: {r.get('executable', '?')} (Python {r.get('python', '?')})",
               f"  nemo-gym {r.get('nemo_gym') or 'not installed'}, nemo-lens "
               f"{r.get('nemo_lens') or 'not installed'}, opentelemetry-sdk "
               f"{r.get('opentelemetry_sdk') or 'not installed'}; compatibility shim "
               f"{'loaded' if r.get('shim_loaded') else 'not loaded'}"]
        env = r.get("env") or {}
        out.append("  telemetry environment: " + (", ".join(f"{k}={v}" for k, v in
                                                           sorted(env.items())) or "none set"))
        for f in self.findings:
            mark = {"ok": "ok     ", "problem": "PROBLEM", "note": "note   "}[f.level]
            out.append(f"{mark} {f.what}")
            if f.fix:
                out.append(f"        -> {f.fix}")
        out.append("Gym would export telemetry." if self.healthy else
                   "Gym would export NOTHING; fix the problems above.")
        return out


# -- running the probe -------------------------------------------------------------------------
def gym_python() -> str | None:
    """The interpreter of the ``gym`` command on PATH (its shebang), if there is one."""
    gym = shutil.which("gym")
    if gym is None:
        return None
    try:
        first = Path(gym).read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    if first.startswith("#!"):
        interpreter = first[2:].strip().split()[0]
        if Path(interpreter).exists():
            return interpreter
    return None


def run_probe(python: str, *, span_groups: str, endpoint: str | None = None,
              protocol: str = "http/protobuf", token: str = "",
              env: dict[str, str] | None = None,
              timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """The probe's report from ``python``'s environment."""
    if not Path(python).exists():
        raise DoctorInputError(f"no interpreter at {python}")
    cmd = [python, str(packaged("probe.py")), "--span-groups", span_groups, "--token", token]
    if endpoint:
        cmd += ["--endpoint", endpoint, "--protocol", protocol]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env=dict(os.environ if env is None else env), cwd="/")
    except subprocess.TimeoutExpired:
        raise DoctorInputError(f"the probe in {python} did not finish in {timeout_s:g} s") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise DoctorInputError(
            f"{python} did not run the probe (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-800:]}") from None


def _query(endpoint: str, sql: str) -> list[dict[str, Any]] | None:
    """Rows from a rolloutscope collector's query endpoint; None if it is not one."""
    url = endpoint.rstrip("/") + "/v1/query"
    body = json.dumps({"sql": sql, "format": "json"}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - the user's URL
            doc = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError):
        return None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    return rows if isinstance(rows, list) else None


def arrived(endpoint: str, token: str, wait_s: float = ARRIVAL_WAIT_S) -> bool | None:
    """Whether the probe span with ``token`` is in the collector at ``endpoint`` (None: the
    endpoint does not answer rolloutscope's query API, so it cannot say)."""
    sql = ("SELECT count(*) AS n FROM spans WHERE name = 'rolloutscope.doctor.probe' AND "
           f"(attributes->>'rolloutscope.doctor.token') = '{token}'")  # token: our uuid hex
    deadline = time.monotonic() + wait_s
    while True:
        rows = _query(endpoint, sql)
        if rows is None:
            return None
        if rows and rows[0].get("n"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)


def examine(python: str, *, span_groups: str = "per_rollout", endpoint: str | None = None,
            protocol: str = "http/protobuf",
            env: dict[str, str] | None = None) -> Diagnosis:
    if endpoint is not None:
        _check_endpoint(endpoint)
    token = uuid.uuid4().hex
    report = run_probe(python, span_groups=span_groups, endpoint=endpoint, protocol=protocol,
                       token=token if endpoint else "", env=env)
    came = None
    if endpoint and report.get("sent"):
        came = arrived(endpoint, token)
    return Diagnosis(report=report, findings=tuple(diagnose(report, span_groups=span_groups,
                                                            endpoint=endpoint, arrived=came,
                                                            python=python)),
                     arrived=came)


def _check_endpoint(endpoint: str) -> None:
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise DoctorInputError(f"--endpoint {endpoint!r} is not an http(s) URL, e.g. "
                               f"http://127.0.0.1:4318")


# -- reading the report ------------------------------------------------------------------------
def diagnose(report: dict[str, Any], *, span_groups: str, endpoint: str | None = None,
             arrived: bool | None = None, python: str = "PYTHON") -> list[Finding]:
    """What is wrong, in the order a user meets it, each with what to do."""
    out: list[Finding] = []
    shim_fix = (f"install the compatibility shim: rolloutscope doctor gym --install-shim "
                f"--python {python}")
    if "crashed" in report:
        return [Finding(level="problem", what=f"the probe crashed: {report['crashed']}")]
    if not report.get("nemo_gym"):
        return [Finding(level="problem", what=f"nemo-gym is not installed in {python}",
                        fix="pass the Gym environment's interpreter with --python")]
    if not report.get("nemo_lens"):
        return [Finding(level="problem", what="nemo-lens is not installed: Gym has no "
                        "telemetry at all", fix='pip install "nemo-gym[telemetry]"')]
    errors = report.get("errors") or {}
    names = report.get("lens_names") or {}
    patched = set(names.get("patched_by_shim") or ())
    records = report.get("records") or []
    missing = [n for n in ("NV_DL_RANK", "NV_DL_WORLD_SIZE", "SpanRegistry") if not names.get(n)]
    trap = any(TRAP_MESSAGE in r.get("message", "") for r in records)
    if missing or trap:
        out.append(Finding(
            level="problem",
            what=(f"nemo-lens {report['nemo_lens']} lacks "
                  f"{_listed(missing) if missing else 'a name'}, which nemo-gym "
                  f"{report['nemo_gym']} imports; Gym's init_telemetry fails that import and "
                  f"says only, at DEBUG: '{TRAP_MESSAGE}'. No Gym process exports anything."),
            fix=shim_fix))
    elif patched:
        out.append(Finding(level="ok", what="the compatibility shim supplies "
                           + ", ".join(sorted(patched))))
    else:
        out.append(Finding(level="ok", what=f"nemo-lens {report['nemo_lens']} has NV_DL_RANK "
                           f"and SpanRegistry (the shim has nothing to do here)"))
    if "lens_resolve" in errors:
        out.append(Finding(
            level="problem",
            what=f"nemo-lens cannot resolve span_groups {span_groups!r} "
                 f"({errors['lens_resolve']}): setup_telemetry raises, Gym logs one WARNING "
                 f"and exports nothing",
            fix=shim_fix if not patched else "check the span_groups value"))
    init = report.get("init") or {}
    groups = report.get("enabled_groups") or []
    wanted = set(report.get("gym_resolve") or ())
    if init.get("exporting") and not groups:
        out.append(Finding(
            level="problem",
            what=f"telemetry initialises but no Gym span group is on for {span_groups!r} "
                 f"(nemo-lens's own vocabulary has none of Gym's groups): no Gym span is made",
            fix=shim_fix if not patched else "use span_groups: per_rollout (or default)"))
    elif init.get("exporting"):
        lost = sorted(wanted - set(groups))
        out.append(Finding(level="problem" if lost else "ok",
                           what=f"Gym telemetry initialises and exports; span groups on: "
                                f"{', '.join(groups)}"
                                + (f"; asked for but off: {', '.join(lost)}" if lost else "")))
    elif not (missing or trap):
        reason = next((r["message"] for r in records if r["level"] in ("WARNING", "ERROR")
                       and r["logger"].startswith(("nemo_gym", "nemo.lens"))), None)
        out.append(Finding(level="problem",
                           what="Gym's init_telemetry returned no exporting handle"
                                + (f": {reason}" if reason else ""),
                           fix="see the records above; check the NEMO_GYM_OTEL_* environment"))
    if "rollout" in groups:
        out.append(Finding(
            level="note",
            what="Gym stamps nemo.gym.rollout.id on spans only with observability_enabled: "
                 "true in its config (which also needs model_call_capture_dir)",
            fix="set observability_enabled: true, or rollouts are named after their traces"))
    env = report.get("env") or {}
    protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if not endpoint and not env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        out.append(Finding(level="note",
                           what="no OTEL_EXPORTER_OTLP_ENDPOINT is set: Gym's exporter sends "
                                "to its default, OTLP/gRPC on localhost:4317",
                           fix="set telemetry.otlp_endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT) "
                               "to your collector, e.g. rolloutscope serve's "
                               "http://127.0.0.1:4318 with protocol http/protobuf"))
    elif not endpoint and protocol is None:
        out.append(Finding(level="note", what="OTEL_EXPORTER_OTLP_PROTOCOL is unset: the "
                           "exporter speaks gRPC", fix="set it to http/protobuf for an "
                           "OTLP/HTTP endpoint such as rolloutscope serve's :4318"))
    if endpoint:
        failures = [r["message"] for r in records if r["level"] in ("WARNING", "ERROR")
                    and r["logger"].startswith("opentelemetry")]
        if not report.get("sent"):
            pass  # nothing was sent: the problems above say why
        elif arrived is True:
            out.append(Finding(level="ok", what=f"a probe span sent through Gym's telemetry "
                               f"reached the collector at {endpoint}"))
        elif arrived is False or failures:
            out.append(Finding(
                level="problem",
                what=f"the probe span did not reach {endpoint}"
                     + (f": {failures[0][:300]}" if failures else ""),
                fix="check that the collector runs there and the protocol matches "
                    "(http/protobuf for :4318, grpc for :4317)"))
        else:
            out.append(Finding(level="note", what=f"a probe span was sent to {endpoint}; that "
                               f"endpoint does not answer rolloutscope's query API, so whether "
                               f"it stored the span is not known here"))
    return out


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# -- the shim ----------------------------------------------------------------------------------
def install_shim(report: dict[str, Any]) -> list[Path]:
    """Copy the shim and its .pth line into the environment's site-packages; the files."""
    site = _site(report)
    target, pth = site / f"{SHIM_MODULE}.py", site / PTH_NAME
    try:
        shutil.copyfile(packaged(f"{SHIM_MODULE}.py"), target)
        pth.write_text(f"import {SHIM_MODULE}\n")
    except OSError as exc:
        raise DoctorInputError(f"cannot write the shim into {site}: {exc.strerror}") from None
    return [target, pth]


def remove_shim(report: dict[str, Any]) -> list[Path]:
    site = _site(report)
    removed = []
    for path in (site / PTH_NAME, site / f"{SHIM_MODULE}.py"):
        if path.exists():
            path.unlink()
            removed.append(path)
    return removed


def write_shim_dir(directory: Path) -> list[Path]:
    """The PYTHONPATH form, for Gym servers that run from other environments than the one
    ``gym`` runs from: the shim plus a sitecustomize.py that imports it."""
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / f"{SHIM_MODULE}.py"
    custom = directory / "sitecustomize.py"
    shutil.copyfile(packaged(f"{SHIM_MODULE}.py"), shim)
    custom.write_text(f"import {SHIM_MODULE}  # noqa: F401 - see that module\n")
    return [shim, custom]


def _site(report: dict[str, Any]) -> Path:
    site = report.get("purelib")
    if not site or not Path(site).is_dir():
        raise DoctorInputError(f"the Gym environment reported no site-packages ({site!r})")
    return Path(site)


__all__ = ["Diagnosis", "DoctorInputError", "Finding", "diagnose", "examine", "gym_python",
           "install_shim", "remove_shim", "run_probe", "write_shim_dir"]
