"""The live dashboard of ``rolloutscope serve`` and ``rolloutscope demo``, in a process of its
own.

``DashboardProcess`` runs ``rolloutscope dashboard URL`` (``cli/dashboard.py``) against the
collector's OTLP/HTTP base URL, waits for the line that says it serves, and restarts it if it
exits while the collector runs (a dashboard killed for its memory comes back; ingest never
noticed). The collector's token reaches it in its environment, never on its command line.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

log = logging.getLogger("rolloutscope.cli.serve")

READY_PREFIX = "dashboard: "
TOKEN_ENV = "ROLLOUTSCOPE_DASHBOARD_TOKEN"
START_TIMEOUT_S = 120.0
RESTART_AFTER_S = 2.0


class DashboardProcess:
    def __init__(self, collector_url: str, *, port: int, token: str | None = None,
                 waiting_for: str | None = None, run_id: str | None = None) -> None:
        self.collector_url = collector_url
        self.run_id = run_id
        self.port = port
        self.token = token
        self.waiting_for = waiting_for
        self.url: str | None = None
        self.restarts = 0
        self._proc: subprocess.Popen | None = None
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    def _command(self) -> list[str]:
        cmd = [sys.executable, "-m", "rolloutscope", "dashboard", self.collector_url,
               "--port", str(self.port), "--no-browser"]
        if self.waiting_for:
            cmd += ["--waiting-for", self.waiting_for]
        if self.run_id:
            cmd += ["--run-id", self.run_id]
        return cmd

    def _spawn(self) -> str:
        env = dict(os.environ)
        env.pop(TOKEN_ENV, None)
        if self.token:
            env[TOKEN_ENV] = self.token
        proc = subprocess.Popen(self._command(), stdout=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
        self._proc = proc
        box: dict[str, str] = {}
        ready = threading.Event()

        def pump() -> None:  # its stdout, until it ends: the ready line, then passed on
            for line in proc.stdout:
                if not ready.is_set() and line.startswith(READY_PREFIX):
                    box["url"] = line[len(READY_PREFIX):].strip()
                    ready.set()
                    continue
                sys.stdout.write(line)
                sys.stdout.flush()
            ready.set()

        threading.Thread(target=pump, name="rolloutscope-dashboard-out", daemon=True).start()
        ready.wait(START_TIMEOUT_S)
        if "url" not in box:
            self._kill(proc)
            raise OSError(f"the dashboard process did not start within {START_TIMEOUT_S:g} s "
                          f"(exit status {proc.poll()})")
        return box["url"]

    def start(self) -> str:
        """Start it; its URL once it serves. Raises ``OSError`` if it could not."""
        self.url = self._spawn()
        # the port it found is its port from now on: a restart serves the same URL
        self.port = int(self.url.rstrip("/").rsplit(":", 1)[1])
        self._watcher = threading.Thread(target=self._watch, name="rolloutscope-dashboard",
                                         daemon=True)
        self._watcher.start()
        return self.url

    def _watch(self) -> None:
        while not self._stopping.is_set():
            proc = self._proc
            if proc is None or proc.poll() is None:
                self._stopping.wait(0.5)
                continue
            log.warning("the live dashboard exited (status %s); restarting it in %g s",
                        proc.returncode, RESTART_AFTER_S)
            if self._stopping.wait(RESTART_AFTER_S):
                return
            try:
                self._spawn()
                self.restarts += 1
            except OSError as exc:
                log.warning("the live dashboard could not be restarted: %s", exc)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        if self._proc is not None:
            self._kill(self._proc)

