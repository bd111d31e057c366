"""Replaying against the real participant code: NeMo-RL and NeMo-Gym as they are.

``sources`` finds and loads the upstream code from the user's environment; ``signatures`` is
the recorded table of the upstream signatures the adapters and the doubles are held to;
``records`` are the typed implementation records a replay report carries; ``rl_fleet``,
``rl_router``, ``rl_deadline`` and ``gym_agent`` drive the real classes with their real calling
conventions from the engine. ``imports`` reads from a checkout's source every import a module
lacks; ``gym_model`` records the revisions of Gym's policy-model participant and why none is
driven. ``rolloutscope.replay.doubles`` holds stand-ins with the same signatures, for machines
without the upstream code. docs/replaying-real-code.md is the guide.
"""
