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

# window mode (docs/dashboard.md#window-mode): a run of more spans than this has its interval
# views read for a stretch of time, not whole; the stretch a session opens on is the run's last
# ``WINDOW_MINUTES``, and a stretch picked wider is cut to its last ``WINDOW_MAX_MINUTES``
WINDOW_SPANS_ENV = "ROLLOUTSCOPE_DASHBOARD_WINDOW_SPANS"
WINDOW_MINUTES_ENV = "ROLLOUTSCOPE_DASHBOARD_WINDOW_MINUTES"
DEFAULT_WINDOW_SPANS = 1_000_000
DEFAULT_WINDOW_MINUTES = 15.0
WINDOW_MAX_MINUTES = 120.0
