"""Runs written out in other tools' formats (``perfetto``: Chrome trace-event JSON for
ui.perfetto.dev). Reads only the store, so any reader can export."""
