"""The simulated system a replay runs: controller rollouts, Gym executions, snapshots.

Glue between the pure participant models and the engine: it decides *when* things happen
(virtual time), asks the participants *what* happens, and turns both into spans.
"""
