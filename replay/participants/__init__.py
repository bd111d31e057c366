"""Participant models: pure state machines with an injected clock and no I/O."""
