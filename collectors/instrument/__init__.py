"""Instrumenting real training processes without editing them.

Three adapters, each a thin shell that records what the code it wraps already does and never
raises into it:

- ``ObservedFleetHealth`` (``observe_fleet_health``): wraps an object with NeMo-RL's
  ``GenerationFleetHealth`` API; shard-state spans, transition, probe and reported-failure events.
- ``Deadline`` / ``DeadlineRegistry``: a drop-in ``_Deadline`` and a holder-counting
  ``RequestDeadlineRegistry``; ``rl.deadline`` spans and their events.
- ``GymCheckpointMiddleware``: pure ASGI middleware for Gym servers; checkpoint-operation spans
  of both protocol generations and refusal events.

``docs/instrumenting.md`` says where each goes and what it shows. The clocks a ``Deadline`` is
handed (``LoopClock`` live, ``ManualClock`` in tests) live in ``rolloutscope.clock``.

They run inside the observed process, so they import only the standard library, OpenTelemetry,
orjson and rolloutscope's vocabulary and clocks, never the store or the workbench's DuckDB,
Arrow and pandas (tests/instrument/test_light_client.py;
docs/instrumenting.md#the-client-side-in-an-observed-process).
"""

from rolloutscope.collectors.instrument.deadlines import (
    Deadline,
    DeadlineRegistry,
    RolloutTimeout,
)
from rolloutscope.collectors.instrument.fleet import ObservedFleetHealth, observe_fleet_health
from rolloutscope.collectors.instrument.gym_asgi import (
    DEFAULT_MAX_BODY_BYTES,
    GymCheckpointMiddleware,
)

__all__ = [
    "DEFAULT_MAX_BODY_BYTES", "Deadline", "DeadlineRegistry", "GymCheckpointMiddleware",
    "ObservedFleetHealth", "RolloutTimeout", "observe_fleet_health",
]
