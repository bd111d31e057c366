"""The importers take the collector's rule: a value the store cannot hold (a time past 2262, a
step or index past its column, a duration no controller prints) is a bad line with its file
and line and the import goes on; a directory given where files are read is a clear error, not a
traceback. Each case runs ``rolloutscope import`` in its own process and checks its exit code,
what it said, the rows it wrote, that the run imported before it is intact and its peak RSS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rolloutscope.store import RunStore

EARLIER_RUN = "imported-before"
PEAK_RSS_MIB = 600  # an import holds at most one chunk of rows: far below this
PAST = "is past the latest time the store holds"
GOOD_TB = {"step": 1, "wall_time": 1_787_000_000.0, "rollout/committed_total": 3.0}


@dataclass(frozen=True)
class ImportCase:
    name: str
    kind: str
    lines: list[str] | None  # the file's lines; None: give a directory instead of a file
    code: int
    message: str  # in the report's bad lines (exit 0) or the error (exit 2)
    bad_line: int | None = None  # the line the report names
    rows: int | None = None  # rows of the case's run (metrics / logs / spans by kind)
    extra: tuple[str, ...] = ()


def _jsonl(*records: dict) -> list[str]:
    return [json.dumps(r) for r in records]


def _otlp_span(end: int = 1_787_000_000_000_001_000, **attributes) -> str:
    attrs = [{"key": k, "value": v} for k, v in attributes.items()]
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{
        "scope": {}, "spans": [{"traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": os.urandom(8).hex(), "name": "hostile",
                                "startTimeUnixNano": "1787000000000000000",
                                "endTimeUnixNano": str(end), "attributes": attrs}]}]}]})


LOG_OK = "[2026-08-20T10:00:00Z] train step 1/10 trainer_v=1 lag=0"
CASES = [
    ImportCase("rl-metrics: a wall time of 1e300 s", "rl-metrics",
               _jsonl(GOOD_TB, {**GOOD_TB, "wall_time": 1e300}, GOOD_TB), 0,
               f"wall_time 1e+300 s {PAST}", bad_line=2, rows=2),
    ImportCase("rl-metrics: an ISO time in the year 9999", "rl-metrics",
               _jsonl(GOOD_TB, {**GOOD_TB, "wall_time": "9999-12-31T00:00:00Z"}), 0,
               f"'9999-12-31T00:00:00Z' 253402214400000000000 {PAST}", bad_line=2, rows=1),
    ImportCase("rl-metrics: a step of 1e300", "rl-metrics",
               _jsonl({**GOOD_TB, "step": 1e300}, GOOD_TB), 0,
               "step 1e+300 is out of range for a step (BIGINT)", bad_line=1, rows=1),
    ImportCase("rl-metrics: a step of 2^63", "rl-metrics",
               [json.dumps(GOOD_TB), '{"step": 9223372036854775808, "wall_time": 1787000000, '
                                     '"x": 1}'], 0,
               "step 9223372036854775808 is out of range for a step (BIGINT)", bad_line=2,
               rows=1),
    ImportCase("rl-metrics: line order past 2262", "rl-metrics",
               _jsonl({"step": 1, "x": 1}, {"step": 2, "x": 2}, {"step": 3, "x": 3}), 0,
               f"record 1 of line order (--start plus 1 x 1e+17 s) {PAST}", bad_line=2, rows=1,
               extra=("--start", "2026-08-20T10:00:00Z", "--interval-s", "1e17")),
    ImportCase("rl-metrics: --start in the year 9999", "rl-metrics",
               _jsonl({"step": 1, "x": 1}), 2, "--start: '9999-01-01T00:00:00Z'",
               extra=("--start", "9999-01-01T00:00:00Z")),
    ImportCase("rl-log: a timestamp in the year 9999", "rl-log",
               [LOG_OK, "[9999-12-31T23:59:59Z] train step 2/10 trainer_v=2 lag=0",
                "[2026-08-20T10:01:00Z] train step 3/10 trainer_v=3 lag=0"], 0,
               f"line is not placed in time: its timestamp 253402300799000000000 {PAST}",
               bad_line=2, rows=3),
    ImportCase("rl-log: a shard index past INTEGER", "rl-log",
               [LOG_OK, "[2026-08-20T10:00:01Z] gen_fleet: shard 99999999999 healthy -> "
                        "suspect (None)"], 0,
               "shard 99999999999 is out of range (at most 2147483647)", bad_line=2, rows=2),
    ImportCase("rl-log: a sync of 10^14 s", "rl-log",
               [LOG_OK, "[2026-08-20T10:00:02Z] _sync_weights: sync done in 99999999999999s"],
               0, "seconds 1e+14 is out of range (at most 1e+09)", bad_line=2, rows=2),
    ImportCase("rl-log: a prompt index past BIGINT", "rl-log",
               [LOG_OK, "[2026-08-20T10:00:03Z] dropping prompt idx=99999999999999999999 after "
                        "1 infrastructure failure(s) (ActorDiedError: gone)"], 0,
               "prompt_idx 99999999999999999999 is out of range", bad_line=2, rows=2),
    ImportCase("rl-log: a directory given as the log", "rl-log", None, 2,
               "a directory, and rl-log reads files; give the files in it"),
    ImportCase("otlp-json: a span ending at uint64 max", "otlp-json",
               [_otlp_span(), _otlp_span(end=2**64 - 1), _otlp_span()], 0,
               f"end_time_unix_nano 18446744073709551615 {PAST}", bad_line=2, rows=2),
    ImportCase("otlp-json: an attempt of 2^40", "otlp-json",
               [_otlp_span(**{"nemo.rl.rollout.attempt": {"intValue": str(2**40)}}),
                _otlp_span()], 0, "does not fit column attempt (INTEGER)", bad_line=1, rows=1),
    ImportCase("otlp-json: a directory given as the file", "otlp-json", None, 2,
               "a directory, and otlp-json reads files"),
]
TABLES = {"rl-metrics": "metrics", "rl-log": "logs", "otlp-json": "spans"}


# ``rolloutscope import`` that says, as it ends, its peak RSS: the kernel's VmHWM of the process
# after it started Python (a child's rusage would count the image it was forked from)
_CHILD = ("import sys\nfrom rolloutscope.cli import main\nrc = main(sys.argv[1:])\n"
          "status = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
          "print('\\npeak-rss-kib', status, flush=True)\nsys.exit(rc)\n")


def _import(*argv: str) -> tuple[int, str, int]:
    """``rolloutscope import`` in its own process: (exit code, what it printed, peak RSS MiB)."""
    done = subprocess.run([sys.executable, "-c", _CHILD, "import", *argv], capture_output=True,
                          text=True, timeout=300)
    out, _, peak = done.stdout.rpartition("\npeak-rss-kib ")
    assert peak, done.stdout + done.stderr
    return done.returncode, out + done.stderr, int(peak.split()[0]) // 1024


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("hostile-imports")
    db = directory / "run.duckdb"
    earlier = directory / "earlier.jsonl"
    earlier.write_text("\n".join(_jsonl(*({**GOOD_TB, "step": s} for s in range(5)))) + "\n")
    code, out, _ = _import("rl-metrics", str(earlier), "--db", str(db), "--run-id", EARLIER_RUN)
    assert code == 0, out
    return db


def test_the_import_corpus_has_its_cases():
    assert len({c.name for c in CASES}) == len(CASES) >= 14


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_value_the_store_cannot_hold_is_a_bad_line_and_the_import_goes_on(store, case,
                                                                           tmp_path):
    run_id = f"case-{CASES.index(case)}"
    if case.lines is None:
        given = tmp_path / "logs"
        given.mkdir()
        (given / "inside.log").write_text(LOG_OK + "\n")
    else:
        given = tmp_path / ("input.jsonl" if case.kind != "rl-log" else "controller.log")
        given.write_text("\n".join(case.lines) + "\n")
    code, out, peak = _import(case.kind, str(given), "--db", str(store), "--run-id", run_id,
                              "--json", *case.extra)
    assert code == case.code, out
    assert "Traceback" not in out
    if code == 0:
        report = json.loads(out[out.index("{"):])
        bad = [b for b in report["bad"] if case.message in b]
        assert bad, report["bad"]
        assert bad[0].startswith(f"{given}:{case.bad_line}: ")
        with RunStore(store, read_only=True) as s:
            rows = s.query(f"SELECT count(*) FROM {TABLES[case.kind]} WHERE run_id = ?",
                           [run_id])[0][0]
        assert rows == case.rows
    else:
        assert case.message in out
    with RunStore(store, read_only=True) as s:
        assert s.query("SELECT count(*) FROM metrics WHERE run_id = ?", [EARLIER_RUN]) == [(5,)]
    assert peak < PEAK_RSS_MIB
