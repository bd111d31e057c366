"""A PostgreSQL server of the tests' own: initdb in a temporary folder, loopback only, stopped
afterwards. Debian's ``postgresql`` package provides the binaries (scripts/setup.sh installs
it); root cannot run postgres, so as root the server runs as the package's ``postgres`` user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def unavailable_reason() -> str | None:
    """Why no server can start here, or None."""
    if _bindir() is None:
        return "Debian's postgresql package is not installed (scripts/setup.sh installs it)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root without runuser to start the server as postgres"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running server; yields the libpq connection string of its database ``lake``."""
    bindir = _bindir()
    assert bindir is not None
    root = Path(tempfile.mkdtemp(prefix="rolloutscope-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres", "postgres")
    data, sock = root / "data", root / "sock"

    def run(*cmd: str) -> None:
        done = subprocess.run([*as_user, *cmd], capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stdout}{done.stderr}")

    run("mkdir", "-p", str(sock))
    run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
        "--no-sync", "-E", "UTF8")
    port = _free_port()
    opts = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={sock} " \
           f"-c fsync=off -c max_connections=100"
    run(str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"),
        "-w", "-t", "60", "start")
    try:
        run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
            "lake")
        yield f"dbname=lake host=127.0.0.1 port={port} user=postgres"
    finally:
        run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def create_database(conninfo: str, name: str) -> str:
    """A new database ``name`` on the server ``conninfo`` names; its connection string."""
    opts = dict(part.split("=", 1) for part in conninfo.split())
    done = subprocess.run([str(_bindir() / "createdb"), "-h", opts["host"], "-p", opts["port"],
                           "-U", opts["user"], name], capture_output=True, text=True, timeout=60)
    if done.returncode:
        raise RuntimeError(f"createdb {name} failed: {done.stdout}{done.stderr}")
    return " ".join(f"{k}={name if k == 'dbname' else v}" for k, v in opts.items())
