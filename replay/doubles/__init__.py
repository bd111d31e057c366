"""Stand-ins for the upstream NeMo-RL and NeMo-Gym classes the replay adapters drive.

Each module mirrors one upstream module at a named commit (``rolloutscope.replay.real.sources.
DOUBLE_MODULES``): the same class and member names, the same parameter names, kinds and
defaults, the same sync/async shape -- checked against ``replay/real/upstream_signatures.json``
by the tests -- and the behaviour the upstream documents. They are written here, not copied;
they exist so the adapters run in CI and on machines without the upstream code
(``--participant-path nemo_rl=doubles``). A replay against a double is a replay against this
project's reading of upstream, and its report says so.
"""
