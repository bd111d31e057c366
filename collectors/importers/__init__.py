"""Importers: runs that were never pointed at a collector, read from what they left behind.

``rl-log`` (the RL controller's stdout), ``rl-metrics`` (the experiment logger's scalars, from
TensorBoard event files or JSON lines) and ``otlp-json`` (OTLP/JSON files) each write one run of
a run store, as ``source=import``, in the vocabulary live instrumentation uses, so imported runs
get the same model and incident views. A bad line or record never aborts an import; it is counted
and reported with its file and line (``ImportReport``).
"""

from rolloutscope.collectors.importers.report import BadRecord, ImportReport

__all__ = ["BadRecord", "ImportReport"]
