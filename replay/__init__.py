"""Replay: re-execute a run on the virtual clock, against the reference models or the real
participant code, with fixes on or off, and compare.

Which to call:

- a captured run (a run in a store, a window around one of its incidents, a golden capture
  file) replayed and judged against what was captured: ``capture_from_store`` /
  ``capture_from_golden`` make a ``Capture``, then ``replay_run`` (one; raises on divergence),
  ``replay_runs`` (several) or ``iter_replays`` (streaming) give a ``ReplayRunResult`` each, all
  in ``replay_capture``, each taking one ``ReplayOptions`` for how to replay;
- a built-in scenario (``scenarios.get(NAME)``) run into a store: ``replay_into_store``
  (``run_scenario``), giving a ``ReplayResult``; into a running collector at a wall-clock pace:
  ``replay_live`` (``run_live``);
- a grid of configuration points over one scenario, on Ray or locally: ``run_sweep``
  (``sweep``).

The modules under them: ``event_engine`` (the deterministic discrete-event clock every replay
runs on), ``sim/`` (the simulated world), ``participants/`` and ``real/`` (the code under test),
``compare`` (two runs side by side, the report). Importing this package loads none of them; a
name below loads its module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Capture": "replay_capture", "capture_from_store": "replay_capture",
    "capture_from_golden": "replay_capture", "replay_run": "replay_capture",
    "replay_runs": "replay_capture", "iter_replays": "replay_capture",
    "ReplayRunResult": "replay_capture", "ReplayOptions": "replay_capture",
    "replay_into_store": "run_scenario", "ReplayResult": "run_scenario",
    "replay_live": "run_live", "run_sweep": "sweep",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
