"""benchmarks/record.py runs a benchmark and rewrites only its section of benchmarks/README.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "record.py"
README = """# Benchmarks

## bench_tiny

<!-- recorded: bench_tiny -->
Recorded 2026-01-01 by `an old command`: 99 us a span.
<!-- end: bench_tiny -->

## bench_other

<!-- recorded: bench_other -->
Recorded 2026-01-02 by `another command`: kept as it was.
<!-- end: bench_other -->
"""


def _tree(tmp_path: Path, script: str) -> Path:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "README.md").write_text(README)
    (tmp_path / "benchmarks" / "bench_tiny.py").write_text(script)
    return tmp_path


def _record(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RECORD), "--root", str(root), *args],
                          capture_output=True, text=True, timeout=120)


def test_a_run_rewrites_its_own_section_with_the_command_date_and_output(tmp_path):
    root = _tree(tmp_path, "import sys\nprint('decode:', sys.argv[1:], '0.47 us a span')\n")
    done = _record(root, "bench_tiny", "--spans", "10")
    assert done.returncode == 0, done.stderr
    text = (root / "benchmarks" / "README.md").read_text()
    assert "99 us" not in text and "an old command" not in text
    assert "`.venv/bin/python benchmarks/bench_tiny.py --spans 10`" in text
    assert "decode: ['--spans', '10'] 0.47 us a span" in text
    assert "load average" in text and "Recorded 20" in text
    assert "Recorded 2026-01-02 by `another command`: kept as it was." in text
    assert text.count("<!-- recorded: bench_tiny -->") == 1


def test_a_benchmark_without_a_section_gets_one_appended(tmp_path):
    root = _tree(tmp_path, "print('x')\n")
    (root / "benchmarks" / "bench_new.py").write_text("print('new figure')\n")
    assert _record(root, "bench_new").returncode == 0
    text = (root / "benchmarks" / "README.md").read_text()
    assert text.index("<!-- end: bench_other -->") < text.index("## bench_new")
    assert "new figure" in text


def test_a_failing_benchmark_leaves_the_readme_as_it_was(tmp_path):
    root = _tree(tmp_path, "raise SystemExit(3)\n")
    done = _record(root, "bench_tiny")
    assert done.returncode == 3
    assert "README is unchanged" in done.stderr
    assert (root / "benchmarks" / "README.md").read_text() == README


def test_an_unknown_benchmark_is_named(tmp_path):
    root = _tree(tmp_path, "print('x')\n")
    done = _record(root, "bench_nope")
    assert done.returncode == 2
    assert "no benchmark benchmarks/bench_nope.py (known: bench_tiny)" in done.stderr


def test_every_carried_section_names_its_command_and_date():
    text = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    sections = re.findall(r"<!-- recorded: (\S+) -->\n(.*?)<!-- end: \1 -->", text, re.DOTALL)
    assert len(sections) >= 10
    for name, body in sections:
        assert re.search(r"Recorded \d{4}-\d\d-\d\d", body), name
        assert "`" in body.split("\n", 1)[0], name  # the command, quoted
