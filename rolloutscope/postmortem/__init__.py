"""Postmortems: what the notebooks in ``notebooks/`` compute, as tested functions.

Rule: a postmortem notebook holds the story and the calls; everything it computes lives here, under
``tests/postmortem``. The patterns (P1, P4, …) are described in docs/domain/incidents.md. Each
function reads a run store's views (or replays a built-in scenario into one) and returns data,
DataFrames and frozen records, never printing or plotting; the notebooks show those and the
dashboard's own view objects.

- ``runs``: the run a notebook works on (a path given at the top, else a replay it creates).
- ``deadline``: P1, a rollout deadline that fired while a snapshot had the rollout parked.
- ``fleet``: P4, a generation shard quarantined, and how fast probes detect a dead shard.
- ``scale``: checkpoint prepare / commit / restore at 8k and 16k rollouts against the figures
  NVIDIA-NeMo/Gym #3883 published.
- ``imported``: a run that was never collected live, imported from its controller log and
  logger metrics, and the stall and quarantine found in it.
"""
