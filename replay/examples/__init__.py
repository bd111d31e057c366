"""Examples of user code to plug into a replay (docs/replaying-real-code.md)."""
