"""A lake against a file: ingest with 1, 2 and 4 collectors into one lake vs one collector into
one file, and the incidents view on a lake vs on a file holding the same spans.

Ingest: N ``rolloutscope serve`` processes write one lake (sqlite catalog), one sender process
per collector posting pre-encoded 1,000-span OTLP/HTTP batches back to back (retrying 429s);
spans/s is what the senders got acknowledged over the wall time from the common start to the
last acknowledgement, loss is sent minus counted in the store after the collectors stopped.
The file baseline is one collector into one DuckDB file with one sender. Each configuration runs
``--repeats`` times (median reported); ratios are against the file in the same run.

Incidents: the ``scale-16k`` scenario's run file (or, with ``--incidents-from FILE``, any run
file, e.g. a 10M-span one from ``benchmarks/synthetic.py``) copied into a fresh file and into a
lake with ``rolloutscope lake import``, so both hold the same rows under the same views; the
incidents view (``SELECT * FROM incidents``) timed on both, median of ``--repeats``, each on a
fresh read-only open, in turns (file, lake, file, lake, ...).

Run:  .venv/bin/python benchmarks/bench_lake.py   (prints `uptime` before and after)
      .venv/bin/python benchmarks/bench_lake.py --no-ingest --incidents-from synthetic-10000000.duckdb
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
    parser.add_argument("--no-ingest", action="store_true", help="time the incidents view only")
    parser.add_argument("--incidents-from", metavar="FILE",
                        help="a run file to copy into a file and a lake (default: scale-16k)")
    parser.add_argument("--tmp", metavar="DIR", help="where the stores go (default: a temp dir)")
    args = parser.parse_args()
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="bench-lake-"))
    tmp.mkdir(parents=True, exist_ok=True)
    if not args.no_ingest:
        ingest_table(tmp, args)
    incidents_table(tmp, args)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


def ingest_table(tmp: Path, args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="ingest-", dir=tmp))  # fresh stores, whatever --tmp holds
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


def _copy(source: str, dest: str) -> float:
    from rolloutscope.store.lake_ops import copy_runs  # what `rolloutscope lake import` runs

    t = time.perf_counter()
    copy_runs(source, dest)
    return time.perf_counter() - t


def incidents_table(tmp: Path, args: argparse.Namespace) -> None:
    if args.incidents_from:
        source, label = str(Path(args.incidents_from).resolve()), Path(args.incidents_from).stem
    else:
        source, label = str(tmp / "s16k-source.duckdb"), "scale-16k"
        if not Path(source).exists():
            subprocess.run([sys.executable, "-m", "rolloutscope", "scenario", "run", "scale-16k",
                            "--db", source], check=True, capture_output=True)
    file = tmp / f"{label}.duckdb"
    lake = f"ducklake:sqlite:{tmp / label / 'catalog.sqlite'}"
    if not file.exists():
        print(f"copied into a file in {_copy(source, str(file)):.1f} s")
    if not (tmp / label / "catalog.sqlite").exists():
        print(f"copied into a lake in {_copy(source, lake):.1f} s")
    with RunStore(file, read_only=True) as rs:
        spans = rs.query("SELECT count(*) FROM spans")[0][0]
    with RunStore(lake, read_only=True) as rs:
        assert rs.query("SELECT count(*) FROM spans")[0][0] == spans, "the copies differ"
    f_t, l_t = [], []
    for _ in range(args.repeats):
        f_t.append(incidents_s(str(file)))
        l_t.append(incidents_s(lake))
    f_s, l_s = statistics.median(f_t), statistics.median(l_t)
    print(f"incidents view, {label} ({spans:,} spans), median of {args.repeats}: "
          f"file {f_s:.2f} s, lake {l_s:.2f} s, lake/file {l_s / f_s:.2f}  "
          f"(file {', '.join(f'{x:.2f}' for x in f_t)}; lake {', '.join(f'{x:.2f}' for x in l_t)})")


if __name__ == "__main__":
    main()
