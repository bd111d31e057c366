"""The step ledger over synthetic runs of growing size: ms to read one run's ``step_ledger`` and
``step_stragglers`` rows (what ``rolloutscope steps`` and the Steps tab read), each next to the
baseline measured in the same run: reading the run's ``rollout_attempts`` (every try, which the
ledger groups per step instead of handing out). Median of the repeats, taken in turns.

The synthetic run (benchmarks/synthetic.py) has no train step; one ``rl.train_step`` is added
per ``--groups-per-step`` committed tries, starting at the commit that completes its batch and
lasting 5 s, as the controller trains.

    .venv/bin/python benchmarks/bench_ledger.py [--spans 100000 1000000] [--repeats 3]
        [--groups-per-step 256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from rolloutscope.store import RunStore

from synthetic import RUN, generate  # noqa: E402 - benchmarks/ is the script's own folder

READS = {
    "step_ledger": "SELECT * FROM step_ledger WHERE run_id = ?",
    "step_stragglers": "SELECT * FROM step_stragglers WHERE run_id = ?",
    "baseline: rollout_attempts": "SELECT * FROM rollout_attempts WHERE run_id = ?",
}
TRAIN_STEPS = """
INSERT INTO spans (run_id, trace_id, span_id, name, kind, service, start_ns, end_ns,
                   status_code, attributes, resource, scope)
SELECT ?, 'bench-steps', printf('%016x', k), 'rl.train_step', 'INTERNAL', 'nemo-rl/controller',
       end_ns, end_ns + 5000000000, 'UNSET', json_object('nemo.rl.train.step', k), '{}',
       'bench'
FROM (SELECT end_ns, row_number() OVER (ORDER BY end_ns) AS n
      FROM rollout_attempts WHERE run_id = ? AND outcome = 'committed')
CROSS JOIN (SELECT CAST(? AS BIGINT) AS per)
CROSS JOIN LATERAL (SELECT n // per AS k)
WHERE n % per = 0
"""


def build(path: Path, spans: int, per_step: int) -> int:
    generate(path, spans=spans)
    with RunStore(path) as store:
        with store.cursor() as con:
            con.execute(TRAIN_STEPS, [RUN, RUN, per_step])
        return store.query("SELECT count(*) FROM train_steps WHERE run_id = ?", [RUN])[0][0]


def timed(store: RunStore, sql: str) -> tuple[float, int]:
    t = time.perf_counter()
    n = len(store.query_df(sql, [RUN]))
    return (time.perf_counter() - t) * 1000, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--groups-per-step", type=int, default=256)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for spans in args.spans:
            path = Path(tmp) / f"ledger-{spans}.duckdb"
            steps = build(path, spans, args.groups_per_step)
            print(f"{spans:,} spans, {steps:,} train steps; load {os.getloadavg()[0]:.2f}")
            ms: dict[str, list[float]] = {name: [] for name in READS}
            rows: dict[str, int] = {}
            with RunStore(path, read_only=True) as store:
                for _ in range(args.repeats):
                    for name, sql in READS.items():
                        took, rows[name] = timed(store, sql)
                        ms[name].append(took)
            base = statistics.median(ms["baseline: rollout_attempts"])
            for name in READS:
                med = statistics.median(ms[name])
                print(f"  {name:28s} {med:9.1f} ms  {rows[name]:>9,} rows  "
                      f"x{med / base:.2f} of the baseline")
            print(f"  load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
