"""rolloutscope: observability and replay workbench for large RL training runs."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rolloutscope")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"
