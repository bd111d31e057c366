"""A lake against a file: ingest with 1, 2 and 4 collectors into one lake vs one collector into
one file, and the incidents view on a lake vs on a file holding the same spans.

Ingest: N ``rolloutscope serve`` processes write one lake (sqlite catalog), one sender process
per collector posting pre-encoded 1,000-span OTLP/HTTP batches back to back (retrying 429s);
spans/s is what the senders got acknowledged over the wall time from the common start to the
last acknowledgement, loss is sent minus counted in the store after the collectors stopped.
The file baseline is one collector into one DuckDB file with one sender. Each configuration runs
``--repeats`` times (median reported); ratios are against the file in the same run.

Incidents: the ``scale-16k`` scenario's run file, copied into a lake with
``rolloutscope lake import``; the incidents view (``SELECT * FROM incidents``) timed on both,
median of ``--repeats``, each on a fresh read-only open.

Run:  .venv/bin/python benchmarks/bench_lake.py   (prints `uptime` before and after)
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_collector import SPANS_PER_BATCH  # noqa: E402

from rolloutscope.cli.serve import READY_PREFIX  # noqa: E402
from rolloutscope.store import RunStore  # noqa: E402

COLLECTOR = Path(__file__).parent / "bench_collector.py"


def start(store: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "rolloutscope", "serve", "--db", store,
                             "--otlp-http-port", "0", "--otlp-grpc-port", "0", "--no-dashboard"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith(READY_PREFIX), line
    http = dict(p.split("=", 1) for p in line[len(READY_PREFIX):].split())["http"]
    return proc, int(http.rsplit(":", 1)[1])


def ingest(store: str, collectors: int, batches: int) -> dict:
    started = [start(store) for _ in range(collectors)]
    senders = [subprocess.Popen([sys.executable, str(COLLECTOR), "--role", "sender", "--port",
                                 str(port), "--batches", str(batches), "--seed", str(i)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for i, (_, port) in enumerate(started)]
    for s in senders:
        assert s.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    for s in senders:
        s.stdin.write("go\n")
        s.stdin.flush()
    results = [json.loads(s.stdout.readline()) for s in senders]
    wall = time.perf_counter() - t0
    for s in senders:
        s.wait()
    for proc, _ in started:
        proc.send_signal(signal.SIGTERM)
    for proc, _ in started:
        proc.wait(300)
    sent = sum(r["spans"] for r in results)
    with RunStore(store, read_only=True) as rs:
        counted = rs.query("SELECT count(*) FROM spans")[0][0]
    return {"spans_per_s": sent / wall, "loss": sent - counted,
            "retries": sum(r["retries"] for r in results)}


def incidents_s(store: str) -> float:
    with RunStore(store, read_only=True) as rs:
        t = time.perf_counter()
        rs.view("incidents")
        return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=20, help="per sender, 1,000 spans each")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    tmp = Path(tempfile.mkdtemp(prefix="bench-lake-"))
    configs = [("file", 1), ("lake", 1), ("lake", 2), ("lake", 4)]
    rows = {}
    for kind, n in configs:
        runs = []
        for r in range(args.repeats):
            store = (str(tmp / f"f{n}-{r}.duckdb") if kind == "file"
                     else f"ducklake:sqlite:{tmp / f'l{n}-{r}' / 'catalog.sqlite'}")
            runs.append(ingest(store, n, args.batches))
        rows[(kind, n)] = {"spans_per_s": statistics.median(x["spans_per_s"] for x in runs),
                           "loss": max(x["loss"] for x in runs),
                           "retries": sum(x["retries"] for x in runs)}
    base = rows[("file", 1)]["spans_per_s"]
    print(f"ingest, {args.batches * SPANS_PER_BATCH:,} spans per collector, "
          f"median of {args.repeats}:")
    for (kind, n), row in rows.items():
        print(f"  {kind:<4} x{n}: {row['spans_per_s']:>9,.0f} spans/s  "
              f"ratio {row['spans_per_s'] / base:.2f}  loss {row['loss']}  "
              f"429-retries {row['retries']}")
    file = tmp / "s16k.duckdb"
    subprocess.run([sys.executable, "-m", "rolloutscope", "scenario", "run", "scale-16k",
                    "--db", str(file)], check=True, capture_output=True)
    lake = f"ducklake:sqlite:{tmp / 's16k' / 'catalog.sqlite'}"
    subprocess.run([sys.executable, "-m", "rolloutscope", "lake", "import", str(file), lake],
                   check=True, capture_output=True)
    with RunStore(file, read_only=True) as rs:
        spans = rs.query("SELECT count(*) FROM spans")[0][0]
    f_s = statistics.median(incidents_s(str(file)) for _ in range(args.repeats))
    l_s = statistics.median(incidents_s(lake) for _ in range(args.repeats))
    print(f"incidents view, scale-16k ({spans:,} spans), median of {args.repeats}: "
          f"file {f_s:.2f} s, lake {l_s:.2f} s, lake/file {l_s / f_s:.2f}")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
