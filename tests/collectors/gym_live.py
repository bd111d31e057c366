"""A real NeMo-Gym 0.7.0 deployment on loopback, started by Gym's own orchestrator.

``gym env start`` runs the ``example_single_tool_call`` resources server, the ``simple_agent``
agent, the ``openai_model`` model server (pointed at ``openai_stub.py``) and the
``legacy_agent`` environment server its config adds, each as its own process, with telemetry
``{enabled: true, span_groups: per_rollout}``, ``observability_enabled: true`` and OTLP/HTTP to
the given collector. Everything binds 127.0.0.1:

- Ray: Gym's orchestrator calls ``ray.init()``. Left to itself, Ray listens on every interface
  with its dashboard. So the deployment starts its own head on 127.0.0.1, without the
  dashboard, and hands Gym its address (``ray_head_node_address``).
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` keeps Ray's node address and every listener on
  loopback. ``RAY_AUTH_MODE=disabled`` is set because Ray 2.60 otherwise demands a token from
  the driver that it writes for a head it started itself.
- Gym's per-server environments are links to the one environment under test
  (``skip_venv_if_present``), so nothing is installed at run time.

Every process runs in a session of its own and is stopped by its process group, never by
name; ``stop`` then checks that nothing of it is left, running or listening.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.child_output import read_line

HERE = Path(__file__).parent
READY = "servers ready! Polling"
STARTUP_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 60.0
SERVER_DIRS = ("resources_servers/example_single_tool_call", "responses_api_agents/simple_agent",
               "responses_api_models/openai_model", "environment_servers/legacy_agent")


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(proc: subprocess.Popen, sig: int, wait_s: float) -> None:
    """Signal the leader of the process group ``proc`` leads (it stops its own children: Gym's
    graceful shutdown, ``ray start --block``'s), then stop what outlives it in the group."""
    pgid = proc.pid
    if proc.poll() is None:
        with _quiet():
            proc.send_signal(sig)
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            with _quiet():
                os.killpg(pgid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with _quiet():
                    os.killpg(pgid, signal.SIGKILL)
                proc.wait(10)
    deadline = time.monotonic() + 10
    while group_alive(pgid) and time.monotonic() < deadline:  # children that outlived it
        with _quiet():
            os.killpg(pgid, signal.SIGTERM if time.monotonic() < deadline - 5 else
                      signal.SIGKILL)
        time.sleep(0.2)


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        return kind is not None and issubclass(kind, ProcessLookupError)


def post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, {"error": exc.read().decode(errors="replace")[:500]}


@dataclass
class GymDeployment:
    venv: Path
    endpoint: str  # the collector's OTLP/HTTP base URL
    run_id: str
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gymlive.",
                                                                     dir="/tmp")))
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OTEL_", "NEMO_", "RAY_", "PYTHON"))}
        env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=self.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_METRIC_EXPORT_INTERVAL="2000", NEMO_GYM_OTEL_RUN_ID=self.run_id,
            RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled",
            RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost", PYTHONDONTWRITEBYTECODE="1")
        return env

    # -- start --------------------------------------------------------------------------------
    def start(self) -> None:
        t0 = time.monotonic()
        names = ("head", "resources", "agent", "environment", "model", "ray")
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        self._start_stub()
        self._start_ray()
        self._write_config()
        self._start_gym()
        self.timings["start_s"] = time.monotonic() - t0

    def _spawn(self, name: str, cmd: list[str], *, cwd: Path | None = None) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                cwd=cwd or self.root, start_new_session=True)
        log.close()
        self.procs[name] = proc
        return proc

    def _start_stub(self) -> None:
        proc = subprocess.Popen([sys.executable, str(HERE / "openai_stub.py")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, env=self.env())
        self.procs["stub"] = proc
        line = read_line(proc.stdout, time.monotonic() + 30)
        if not line:
            raise RuntimeError("the OpenAI stub did not start")
        assert line.startswith("stub listening "), line
        self.ports["stub"] = int(line.split()[-1])

    def _start_ray(self) -> None:
        self._spawn("ray", [str(self.venv / "bin" / "ray"), "start", "--head", "--block",
                            "--node-ip-address=127.0.0.1", f"--port={self.ports['ray']}",
                            "--include-dashboard=false", "--disable-usage-stats",
                            "--num-cpus=2", f"--temp-dir={self.root / 'ray'}"])
        self._wait(lambda: listening(self.ports["ray"]), 60, "ray head")

    def site_packages(self) -> Path:
        out = subprocess.run([str(self.venv / "bin" / "python"), "-c",
                              "import nemo_gym, pathlib; "
                              "print(pathlib.Path(nemo_gym.__file__).resolve().parent.parent)"],
                             capture_output=True, text=True, check=True, env=self.env())
        return Path(out.stdout.strip())

    def _write_config(self) -> None:
        for d in SERVER_DIRS:
            (self.root / "venvs" / d).mkdir(parents=True)
            (self.root / "venvs" / d / ".venv").symlink_to(self.venv)
        for d in ("capture", "results", "cache", "cwd"):
            (self.root / d).mkdir()
        self.site = self.site_packages()
        self.data = self.site / "resources_servers/example_single_tool_call/data/example.jsonl"
        (self.root / "gym.yaml").write_text(f"""\
telemetry:
  enabled: true
  span_groups: per_rollout
  otlp_protocol: http/protobuf
observability_enabled: true
model_call_capture_dir: {self.root / 'capture'}
policy_base_url: http://127.0.0.1:{self.ports['stub']}/v1
policy_api_key: stub-key
policy_model_name: stub-model
default_host: 127.0.0.1
head_server:
  host: 127.0.0.1
  port: {self.ports['head']}
ray_head_node_address: 127.0.0.1:{self.ports['ray']}
skip_venv_if_present: true
uv_venv_dir: {self.root / 'venvs'}
results_dir: {self.root / 'results'}
cache_dir: {self.root / 'cache'}
model_endpoint_readiness_timeout_seconds: 60
server_spinup_timeout_seconds: {int(STARTUP_TIMEOUT_S)}
""")

    def _start_gym(self) -> None:
        site = self.site
        t0 = time.monotonic()
        self._spawn("gym", [
            str(self.venv / "bin" / "gym"), "env", "start",
            "--config", str(site / "resources_servers/example_single_tool_call/configs/"
                                   "example_single_tool_call.yaml"),
            "--config", str(site / "responses_api_models/openai_model/configs/openai_model.yaml"),
            "--config", str(self.root / "gym.yaml"),
            "++example_single_tool_call.resources_servers.example_single_tool_call.port="
            f"{self.ports['resources']}",
            "++example_single_tool_call_simple_agent.responses_api_agents.simple_agent.port="
            f"{self.ports['agent']}",
            "++example_single_tool_call_environment_server.environment_servers.legacy_agent."
            f"port={self.ports['environment']}",
            f"++policy_model.responses_api_models.openai_model.port={self.ports['model']}"],
            cwd=self.root / "cwd")
        self._wait(lambda: READY in self.log("gym"), STARTUP_TIMEOUT_S, "gym env start",
                   alive="gym")
        # the orchestrator checks the model endpoint right after; its ready line comes first
        self._wait(lambda: all(listening(self.ports[n]) for n in
                               ("resources", "agent", "environment", "model")), 30,
                   "Gym's servers")
        self.timings["gym_ready_s"] = time.monotonic() - t0

    def _wait(self, ok, timeout_s: float, what: str, alive: str | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while not ok():
            if alive is not None and self.procs[alive].poll() is not None:
                raise RuntimeError(f"{what} exited: {self.log(alive)[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready after {timeout_s:g} s: "
                                   f"{self.log(alive or 'ray')[-3000:]}")
            time.sleep(0.25)

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def rss_mb(self) -> dict[str, float]:
        """Resident memory of each part of the deployment (its whole process group)."""
        groups = {p.pid: n for n, p in self.procs.items()}
        out = dict.fromkeys(groups.values(), 0.0)
        ps = subprocess.run(["ps", "-eo", "pgid=,rss="], capture_output=True, text=True).stdout
        for line in ps.splitlines():
            pgid, rss = (int(x) for x in line.split())
            if pgid in groups:
                out[groups[pgid]] += rss / 1024
        return out

    # -- traffic ------------------------------------------------------------------------------
    def drive(self) -> list[dict]:
        """What the fixture's driver sent: six /run (0-0 .. 4-0 and 0-0-a1), one bare
        /seed_session, two /verify of the first answer."""
        rows = [json.loads(line) for line in self.data.read_text().splitlines() if line][:5]
        agent = f"http://127.0.0.1:{self.ports['agent']}"
        resources = f"http://127.0.0.1:{self.ports['resources']}"
        replies, first = [], None
        for task, attempt in [(i, 0) for i in range(5)] + [(0, 1)]:
            body = {"responses_create_params": rows[task]["responses_create_params"],
                    "_ng_task_index": task, "_ng_rollout_index": 0}
            if attempt:
                body["_ng_attempt_index"] = attempt
            status, reply = post(f"{agent}/run", body)
            replies.append({"call": "/run", "status": status, "reward": reply.get("reward")})
            first = first or (reply if status == 200 else None)
        status, _ = post(f"{resources}/seed_session", {})
        replies.append({"call": "/seed_session", "status": status})
        for _ in range(2):
            status, reply = post(f"{resources}/verify", {
                "responses_create_params": first["responses_create_params"],
                "response": first["response"]})
            replies.append({"call": "/verify", "status": status, "reward": reply.get("reward")})
        return replies

    def stub_calls(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['stub']}/_stats",
                                    timeout=10) as resp:
            return json.loads(resp.read())

    # -- stop ---------------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Gym's own graceful shutdown (SIGINT: it flushes telemetry), then Ray and the stub;
        what is left running or listening afterwards."""
        t0 = time.monotonic()
        for name, sig, wait_s in (("gym", signal.SIGINT, 90), ("ray", signal.SIGTERM, 30),
                                  ("stub", signal.SIGTERM, 10)):
            if name in self.procs:
                stop_group(self.procs[name], sig, wait_s)
        self.timings["stop_s"] = time.monotonic() - t0
        left = [f"process group {p.pid} ({n})" for n, p in self.procs.items()
                if group_alive(p.pid)]
        left += [f"port {port} ({n})" for n, port in self.ports.items() if listening(port)]
        mine = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
        left += [line for line in mine.splitlines() if str(self.root) in line]
        shutil.rmtree(self.root, ignore_errors=True)
        return left
