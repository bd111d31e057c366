"""A real collector process over loopback, started with ``rolloutscope serve``."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rolloutscope.cli.serve import READY_PREFIX
from rolloutscope.store.remote import CollectorClient
from tests.child_output import read_line

HERE = Path(__file__).parent
SENDER = HERE / "sender.py"
START_DEADLINE_S = 60.0


@dataclass
class Collector:
    process: subprocess.Popen
    db: Path
    http: str
    grpc: str
    token: str | None = None
    output: list[str] = field(default_factory=list)

    @property
    def client(self) -> CollectorClient:
        return CollectorClient(self.http, token=self.token)

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def wait_for_line(self, prefix: str, timeout_s: float = START_DEADLINE_S) -> str:
        """The next output line starting with ``prefix`` (waits with a deadline)."""
        deadline = time.monotonic() + timeout_s
        while (line := read_line(self.process.stdout, deadline)):
            self.output.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line starting {prefix!r}: {''.join(self.output)}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        rc = self.process.wait(timeout_s)
        self.output.append(self.process.stdout.read() or "")
        return rc

    def count(self, table: str = "spans") -> int:
        # table names come from the tests' own literals
        return self.client.query_records(f"SELECT count(*) AS n FROM {table}")[0]["n"]


def serve_command(db: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rolloutscope", "serve", "--db", str(db),
            "--otlp-http-port", "0", "--otlp-grpc-port", "0", *extra,
            *(() if "--dashboard-port" in extra else ("--no-dashboard",))]


def start_collector(db: Path, *extra: str, token: str | None = None,
                    open_files: tuple[int, int] | None = None) -> Collector:
    """Start ``rolloutscope serve`` and wait (with a deadline) for its ready line;
    ``open_files``: the (soft, hard) open-file limit it starts with."""
    proc = subprocess.Popen(serve_command(db, *extra), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=_env(),
                            preexec_fn=None if open_files is None else
                            lambda: resource.setrlimit(resource.RLIMIT_NOFILE, open_files))
    deadline = time.monotonic() + START_DEADLINE_S
    lines = []
    while (line := read_line(proc.stdout, deadline)):
        lines.append(line)
        if line.startswith(READY_PREFIX):
            fields = dict(part.split("=", 1) for part in line[len(READY_PREFIX):].split())
            return Collector(proc, db, fields["http"], fields["grpc"], token, lines)
    proc.kill()
    raise RuntimeError(f"collector did not become ready: {''.join(lines)}{proc.stdout.read()}")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return env


def run_sender(*args: str, timeout_s: float = 120.0) -> dict:
    """Run tests/collectors/sender.py in its own process; its last stdout line is JSON."""
    done = subprocess.run([sys.executable, str(SENDER), *args], capture_output=True,
                          text=True, timeout=timeout_s, env=_env())
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def start_sender(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SENDER), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())


def acked(ack_file: Path) -> list[int]:
    """The batches a sender recorded as acknowledged in its ack file."""
    if not ack_file.exists():
        return []
    text = ack_file.read_text()
    complete = text[: text.rfind("\n") + 1]  # a line being written is not an ack yet
    return [int(line) for line in complete.splitlines()]


def wait_for_acks(files: list[Path], at_least: int, deadline_s: float) -> None:
    """Until every ack file holds ``at_least`` acks; fails past ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while min(len(acked(f)) for f in files) < at_least:
        assert time.monotonic() < deadline, "senders made no progress"
        time.sleep(0.05)  # polling files written by other processes; no event to await


@pytest.fixture(scope="module")
def collector(tmp_path_factory) -> Iterator[Collector]:
    """One collector per test module, with default settings."""
    c = start_collector(tmp_path_factory.mktemp("collector") / "run.duckdb")
    yield c
    c.stop()
