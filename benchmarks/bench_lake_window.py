"""A window read on a lake against the same read on a file: files touched and time, before and
after upkeep.

The run: ``benchmarks/synthetic.py``'s (``--spans``, about 2.7 hours of spans at 1M) written
into a DuckDB file and into a lake (sqlite catalog) as collectors write them: in the order they
end (a span reaches the collector when it ends), ``--commit-spans`` an ordinary commit, the
lake's commits alternating between ``--writers`` writers (several collectors, each its own
connection and writer id). Only spans are written.

The reads, each timed on both stores in turns (file, lake, file, ...), median of
``--repeats``, on one read-only open per store (the open is not timed):

- ``hour``: the spans that start in one hour in the middle of the run
  (``start_ns >= lo AND start_ns < hi``), every column, fetched as Arrow;
- ``hour overlap``: the spans that overlap that hour (``start_ns < hi AND end_ns >= lo``);
- ``5 min``: the spans that start in one five-minute stretch inside it (one snapshot
  interval of the synthetic run).

Files: on the lake, the files DuckLake opened (EXPLAIN ANALYZE's "Total Files Read"), the files
whose ``start_ns`` min/max in the catalog overlap the window (``lake.window_files``), and all
data files of spans. Then one pass of upkeep (``lake_ops.maintain``: flush, merge adjacent files,
expire snapshots, clean up) and the same reads again.

Run:  .venv/bin/python benchmarks/bench_lake_window.py   (prints `uptime` before and after)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import RUN, generate  # noqa: E402

from rolloutscope.store import RunStore  # noqa: E402
from rolloutscope.store import lake as _lake  # noqa: E402
from rolloutscope.store.lake_ops import MIN_KEEP_SNAPSHOTS_S, maintain  # noqa: E402
from rolloutscope.store.schema import COLUMNS  # noqa: E402

S = 10**9


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def write_as_collectors(source: Path, file: Path, lakes: list[str], *, commit_spans: int,
                        writers: int) -> tuple[int, int]:
    """Copy the source's spans into the file and each lake in arrival (end) order, one commit
    per ``commit_spans``, a lake's commits taking turns among its ``writers``; returns
    (spans, commits)."""
    cols = ", ".join(COLUMNS["spans"])
    stores = [[RunStore(file)]] + [[RunStore(lake) for _ in range(writers)] for lake in lakes]
    try:
        curs = [[s.new_cursor() for s in group] for group in stores]
        for cur in (c for group in curs for c in group):
            cur.execute(f"ATTACH '{source}' AS src (READ_ONLY)")
            cur.execute(f"CREATE TEMP TABLE arrival AS SELECT {cols}, row_number() OVER "
                        f"(ORDER BY end_ns, trace_id, span_id) - 1 AS rn FROM src.spans")
        spans = curs[0][0].execute("SELECT count(*) FROM arrival").fetchall()[0][0]
        commits = 0
        for lo in range(0, spans, commit_spans):
            insert = (f"INSERT INTO spans ({cols}) SELECT {cols} FROM temp.arrival "
                      f"WHERE rn >= {lo} AND rn < {lo + commit_spans}")
            curs[0][0].execute("BEGIN")
            curs[0][0].execute(insert)
            curs[0][0].execute("COMMIT")
            w = commits % writers
            for group, cs in zip(stores[1:], curs[1:], strict=True):
                _lake.with_retries(cs[w], lambda c, a=group[w].writer_id, sql=insert: (
                    _lake.stamp_commit(c, a, "bench"), c.execute(sql)))
            commits += 1
        for cur in (c for group in curs for c in group):
            cur.close()
        return spans, commits
    finally:
        for s in (s for group in stores for s in group):
            s.close()


READS = {
    "hour": "start_ns >= $lo AND start_ns < $hi",
    "hour overlap": "start_ns < $hi AND end_ns >= $lo",
    "5 min": "start_ns >= $lo AND start_ns < $hi",
}


def read_sql(where: str) -> str:
    return f"SELECT * FROM spans WHERE run_id = $run AND {where}"


def measure(file: Path, lake: str, windows: dict, repeats: int) -> dict[str, dict]:
    out: dict[str, dict] = {}
    with RunStore(file, read_only=True) as fs, RunStore(lake, read_only=True) as ls:
        fc, lc = fs.new_cursor(), ls.new_cursor()
        try:
            for name, where in READS.items():
                sql, params = read_sql(where), windows[name]
                rows = fc.execute(f"SELECT count(*) FROM ({sql})", params).fetchall()[0][0]
                assert lc.execute(f"SELECT count(*) FROM ({sql})", params).fetchall()[0][0] \
                    == rows, "the stores differ"
                overlapping, total = _lake.window_files(lc, params["lo"], params["hi"])
                opened = _lake.files_read(lc, sql, params)
                f_t, l_t = [], []
                for _ in range(repeats):
                    for cur, times in ((fc, f_t), (lc, l_t)):
                        t = time.perf_counter()
                        cur.execute(sql, params).to_arrow_table()
                        times.append(time.perf_counter() - t)
                out[name] = {"rows": rows, "file_s": statistics.median(f_t),
                             "lake_s": statistics.median(l_t), "opened": opened,
                             "overlapping": overlapping, "files": total,
                             "f_all": f_t, "l_all": l_t}
        finally:
            fc.close()
            lc.close()
    return out


def report(title: str, res: dict[str, dict], repeats: int) -> None:
    print(f"{title} (median of {repeats}):")
    for name, r in res.items():
        print(f"  {name:<13} {r['rows']:>8,} rows  file {r['file_s'] * 1e3:7.1f} ms  "
              f"lake {r['lake_s'] * 1e3:7.1f} ms  lake/file {r['lake_s'] / r['file_s']:5.2f}  "
              f"lake files opened {r['opened']} (stats overlap {r['overlapping']}) "
              f"of {r['files']}")
        print(f"  {'':<13} file {', '.join(f'{x * 1e3:.1f}' for x in r['f_all'])}; "
              f"lake {', '.join(f'{x * 1e3:.1f}' for x in r['l_all'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--commit-spans", type=int, default=2_000,
                    help="spans per commit (a collector's group commit)")
    ap.add_argument("--writers", type=int, default=2, help="lake writers taking turns")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--lake-options", action="append", default=[], metavar="NAME=VALUE,...",
                    help="also write a lake with these DuckLake options set (set_option), e.g. "
                         "target_file_size=16MB,parquet_row_group_size=16384; repeatable")
    ap.add_argument("--tmp", metavar="DIR", help="where the stores go (default: a temp dir)")
    args = ap.parse_args()
    print("uptime:", uptime())
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="bench-lake-window-"))
    tmp.mkdir(parents=True, exist_ok=True)
    source = tmp / f"synthetic-{args.spans}.duckdb"
    if not source.exists():
        generate(source, spans=args.spans)
    stem = f"w-{args.spans}-{args.commit_spans}"
    file = tmp / f"{stem}.duckdb"
    variants = ["", *args.lake_options]  # "": DuckLake's defaults
    lakes = {v: f"ducklake:sqlite:{tmp / f'{stem}-{args.writers}-{i}' / 'catalog.sqlite'}"
             for i, v in enumerate(variants)}
    if file.exists():
        file.unlink()
    for options, lake in lakes.items():
        shutil.rmtree(Path(_lake.parse(lake).target).parent, ignore_errors=True)
        with RunStore(lake) as store:
            for option in filter(None, options.split(",")):
                name, value = option.split("=", 1)
                store.query(f"CALL {_lake.ALIAS}.set_option(?, ?)", [name, value])
    t0 = time.perf_counter()
    spans, commits = write_as_collectors(source, file, list(lakes.values()),
                                         commit_spans=args.commit_spans, writers=args.writers)
    print(f"wrote {spans:,} spans in {commits} commits into the file and {len(lakes)} lake(s) "
          f"({args.writers} writers each) in {time.perf_counter() - t0:.0f} s")
    with RunStore(file, read_only=True) as fs:
        first, last = fs.query("SELECT min(start_ns), max(end_ns) FROM spans")[0]
    mid = first + (last - first) // 2
    lo = mid - 1800 * S
    hour = {"run": RUN, "lo": lo, "hi": lo + 3600 * S}
    params = {"hour": hour, "hour overlap": hour,
              "5 min": {"run": RUN, "lo": lo + 600 * S, "hi": lo + 900 * S}}
    print(f"run of {(last - first) / 3600e9:.2f} h; the hour starts "
          f"{(lo - first) / 3600e9:.2f} h in")
    for options, lake in lakes.items():
        report(f"as written ({options or 'DuckLake defaults'})",
               measure(file, lake, params, args.repeats), args.repeats)
    for options, lake in lakes.items():
        label = options or "DuckLake defaults"
        with RunStore(lake) as store:
            rep = maintain(store, keep_snapshots_s=MIN_KEEP_SNAPSHOTS_S)
        print(f"upkeep ({label}):", rep.line())
        report(f"after upkeep ({label})", measure(file, lake, params, args.repeats),
               args.repeats)
    print("uptime:", uptime())


if __name__ == "__main__":
    main()
