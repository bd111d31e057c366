"""Reading a child process's output pipe a line at a time, with a deadline.

``select()`` on the pipe and then the text wrapper's ``readline()`` is a race: the wrapper reads
ahead, so when two lines arrive together (a warning, then a ready line, on a busy machine) the
second sits in its buffer and ``select()`` waits on an empty pipe for a line already read.
``read_line`` reads the pipe itself, a byte at a time up to the newline, so nothing is ever held
where ``select()`` cannot see it and the wrapper's own reads later start where it stopped."""

from __future__ import annotations

import os
import select
import time
from typing import IO


def read_line(stream: IO, deadline: float) -> str | None:
    """The pipe's next line (with its newline; what is left, maybe "", at the end of the
    output), or None once ``deadline`` (``time.monotonic()``) has passed without one."""
    fd = stream.fileno()
    line = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        byte = os.read(fd, 1)
        line += byte
        if byte in (b"", b"\n"):
            return line.decode(errors="replace")
