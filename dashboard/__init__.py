"""The Panel dashboard: one DataStore over a run, views that only draw, pure plot builders.

Entry points: ``build_app`` (a session's whole app, also for notebooks), ``start_dashboard``
(served from a thread, for the collector's live mode), ``serve_dashboard`` (foreground, for
``rolloutscope dashboard``). Imported lazily, so that ``rolloutscope --help`` does not load
Panel.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Dashboard": "app", "DashboardServer": "app", "build_app": "app",
    "serve_dashboard": "app", "start_dashboard": "app", "DataStore": "datastore",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f"rolloutscope.dashboard.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(name)
