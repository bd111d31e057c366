"""Where the dashboard listens unless told otherwise (imported by the CLI without Panel)."""

DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 5006

# a served dashboard's bounds (dashboard.shared.DashboardLimits; CLI flags or these variables)
MEMORY_ENV = "ROLLOUTSCOPE_DASHBOARD_MEMORY_MIB"
SESSIONS_ENV = "ROLLOUTSCOPE_DASHBOARD_MAX_SESSIONS"
READ_TIMEOUT_ENV = "ROLLOUTSCOPE_DASHBOARD_READ_TIMEOUT_S"
DEFAULT_MEMORY_MIB = 4096
DEFAULT_MAX_SESSIONS = 20
DEFAULT_READ_TIMEOUT_S = 60.0
