"""Where the dashboard listens unless told otherwise (imported by the CLI without Panel)."""

DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 5006
