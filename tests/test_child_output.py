"""``read_line`` gives every line of a child's output, however they arrive together."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.child_output import read_line


def test_lines_written_together_are_each_read_and_the_rest_stays_in_the_pipe():
    proc = subprocess.Popen([sys.executable, "-c", "print('first\\nsecond\\nthird', flush=True);"
                             "import time; time.sleep(30)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        assert read_line(proc.stdout, deadline) == "first\n"
        assert read_line(proc.stdout, deadline) == "second\n"  # already there: no wait on it
        assert time.monotonic() < deadline - 15
        assert proc.stdout.readline() == "third\n"  # nothing was read past the line
        assert read_line(proc.stdout, time.monotonic() + 0.2) is None  # none within the deadline
    finally:
        proc.kill()
        proc.wait()


def test_the_end_of_the_output_reads_as_empty():
    proc = subprocess.Popen([sys.executable, "-c", "print('only')"], stdout=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 30
    assert read_line(proc.stdout, deadline) == "only\n"
    assert read_line(proc.stdout, deadline) == ""
    proc.wait()
