"""The simulated system a replay runs: controller rollouts, Gym executions, the generation
fleet, snapshots.

Glue between the pure participant models and the engine: it decides *when* things happen
(virtual time), asks the participants *what* happens, and records both as spans. Each side
(``controller``, ``gym``, ``fleet``, ``snapshot``) is handed what it may ask of the others as a
protocol (``ports``) and emits through its own recorder (``*_recorder``); ``world`` builds and
wires them and decides nothing.
"""
