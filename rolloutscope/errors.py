"""The error every package raises for input the user gave that cannot be used.

Each package keeps its own taxonomy (``StoreError``, ``ReplayError``, the OTLP receiver's
``BadRequestError``); what they share is this base for *the user's* mistakes (a path that does
not exist, an option out of range, a file of the wrong kind), which the command line prints on
one line and answers with exit code 2, never with a traceback.
"""

from __future__ import annotations


class InputError(Exception):
    """Something the user asked for or handed in cannot be used; the message says what."""
