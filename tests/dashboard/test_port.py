"""A dashboard port held by another process is refused by name, not served over."""

from __future__ import annotations

import socket

import pytest

from rolloutscope.store import RunStore
from rolloutscope.dashboard.app import DashboardPortInUse, start_dashboard


def test_a_taken_port_is_refused_with_what_to_do(p1_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with RunStore(p1_path, read_only=True) as store:
            with pytest.raises(DashboardPortInUse, match=f"port {port} on 127.0.0.1 is in use"):
                start_dashboard(store, port=port, live=False)
