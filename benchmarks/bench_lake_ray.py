"""A cluster simulated on local Ray: N collector actors write one lake while a reader runs the
incidents view beside them: read latency while writing, and how fresh what it reads is.

The run: the ``scale-16k`` scenario replayed into a run file; its spans (with their events)
are split into N shares by trace (a trace stays on one node, as a rollout's spans come from
its node) and each share is sent by its own sender, a Ray task, through the stock OTLP/HTTP
span exporter (``opentelemetry-exporter-otlp-proto-http``) to its own actor's loopback
endpoint, in batches of ``--batch`` spans as fast as they are acknowledged. The actors are
``rolloutscope.collectors.ray.place_collectors``'s, N of them on the one local node, all
writing one sqlite-catalog lake. Each span is re-timed so it ends when its batch is sent
(its duration and its batch's shape are kept): freshness is then the reader's clock at the
start of a read minus the newest ``end_ns`` the read sees, that is how long ago the newest
visible span was sent. Metrics and logs are not sent.

Meanwhile a reader (this process, a read-only ``RunStore`` of the lake) runs
``SELECT * FROM incidents`` every ``--every-s`` seconds. Baseline: the same reader, same
lake, once the senders finished and the actors stopped (an idle lake, holding all the rows).
Ratio: median read latency while writing / idle. Each size runs ``--repeats`` times on a
fresh lake; the figures are the medians over repeats of each repeat's median and p95.

Run:  .venv/bin/python benchmarks/bench_lake_ray.py [--sizes 2,4,8] [--max-spans N]
(prints `uptime` before and after)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rolloutscope.store import RunStore


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def load_spans(file: Path, limit: int | None) -> list[dict]:
    with RunStore(file, read_only=True) as rs:
        spans = rs.query_df(
            "SELECT run_id, trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, "
            "status_code, status_message, attributes, resource FROM spans "
            f"ORDER BY end_ns {'' if limit is None else f'LIMIT {int(limit)}'}")
        events = rs.query_df("SELECT trace_id, span_id, name, ts_ns, attributes FROM span_events")
    by_span: dict[tuple[str, str], list] = {}
    for e in events.itertuples(index=False):
        by_span.setdefault((e.trace_id, e.span_id), []).append(
            (e.name, int(e.ts_ns), e.attributes))
    out = []
    for s in spans.itertuples(index=False):
        out.append({"run_id": s.run_id, "trace_id": s.trace_id, "span_id": s.span_id,
                    "parent": s.parent_span_id, "name": s.name, "kind": s.kind,
                    "start_ns": int(s.start_ns), "end_ns": int(s.end_ns),
                    "status": s.status_code, "message": s.status_message,
                    "attributes": s.attributes, "resource": s.resource,
                    "events": by_span.get((s.trace_id, s.span_id), [])})
    return out


def send_share(endpoint: str, spans: list[dict], batch: int) -> dict:
    """One node's sender (a Ray task): the stock OTLP/HTTP exporter, batch after batch."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExportResult
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    from rolloutscope.vocabulary import ResourceAttr

    def attrs(text):
        value = json.loads(text) if isinstance(text, str) else (text or {})
        return {k: v for k, v in value.items() if v is not None and not isinstance(v, dict)}

    exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=60)
    resources: dict[tuple, Resource] = {}
    sent = failed = 0
    for i in range(0, len(spans), batch):
        chunk = spans[i:i + batch]
        shift = time.time_ns() - max(s["end_ns"] for s in chunk)  # ends as it is sent
        out = []
        for s in chunk:
            res_attrs = {**attrs(s["resource"]), ResourceAttr.RUN_ID: s["run_id"]}
            key = tuple(sorted(map(str, res_attrs.items())))
            resource = resources.setdefault(key, Resource(res_attrs))
            tid = int(s["trace_id"], 16)
            out.append(ReadableSpan(
                name=s["name"], resource=resource, attributes=attrs(s["attributes"]),
                context=SpanContext(tid, int(s["span_id"], 16), False, TraceFlags(1)),
                parent=(SpanContext(tid, int(s["parent"], 16), False, TraceFlags(1))
                        if s["parent"] else None),
                kind=SpanKind[s["kind"]] if s["kind"] in SpanKind.__members__
                else SpanKind.INTERNAL,
                status=Status(StatusCode[s["status"]] if s["status"] in StatusCode.__members__
                              else StatusCode.UNSET, s["message"]),
                events=[Event(n, attrs(a), ts + shift) for n, ts, a in s["events"]],
                start_time=s["start_ns"] + shift, end_time=s["end_ns"] + shift))
        if exporter.export(out) == SpanExportResult.SUCCESS:
            sent += len(out)
        else:
            failed += len(out)
    exporter.shutdown()
    return {"sent": sent, "failed": failed}


def read_loop(lake: str, every_s: float, stop: threading.Event, out: list) -> None:
    with RunStore(lake, read_only=True) as rs:
        while not stop.is_set():
            t0 = time.perf_counter()
            now_ns = time.time_ns()
            newest = rs.query("SELECT max(end_ns) FROM spans")[0][0]
            rs.view("incidents")
            latency = time.perf_counter() - t0
            out.append((latency, None if newest is None else (now_ns - newest) / 1e9))
            stop.wait(max(0.0, every_s - latency))


def idle_reads(lake: str, n: int) -> list[float]:
    out = []
    with RunStore(lake, read_only=True) as rs:
        for _ in range(n):
            t0 = time.perf_counter()
            rs.query("SELECT max(end_ns) FROM spans")
            rs.view("incidents")
            out.append(time.perf_counter() - t0)
    return out


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def one_run(spans: list[dict], n: int, lake: str, args) -> dict:
    import ray

    from rolloutscope.collectors.ray import place_collectors, stop_collectors

    with RunStore(lake):  # made once, before the actors
        pass
    node = ray.get_runtime_context().get_node_id()
    placed = place_collectors(lake, nodes=[node] * n, commit_max_delay_ms=50.0)
    shares = [[s for s in spans if int(s["trace_id"][-8:], 16) % n == k] for k in range(n)]
    sender = ray.remote(num_cpus=0)(send_share)
    reads: list = []
    stop = threading.Event()
    reader = threading.Thread(target=read_loop, args=(lake, args.every_s, stop, reads))
    t0 = time.perf_counter()
    reader.start()
    try:
        results = ray.get([sender.remote(p.http, share, args.batch)
                           for p, share in zip(placed, shares, strict=True)])
    finally:
        stop.set()
        reader.join()
        stop_collectors(placed)
    wall = time.perf_counter() - t0
    idle = idle_reads(lake, max(3, len(reads)))
    with RunStore(lake, read_only=True) as rs:
        counted = rs.query("SELECT count(*) FROM spans")[0][0]
    busy = [r[0] for r in reads]
    fresh = [r[1] for r in reads if r[1] is not None]
    return {"reads": len(reads), "read_med": statistics.median(busy), "read_p95": p95(busy),
            "fresh_med": statistics.median(fresh) if fresh else float("nan"),
            "fresh_p95": p95(fresh) if fresh else float("nan"),
            "idle_med": statistics.median(idle), "idle_p95": p95(idle),
            "sent": sum(r["sent"] for r in results),
            "failed": sum(r["failed"] for r in results),
            "lost": sum(r["sent"] for r in results) - counted,
            "spans_per_s": sum(r["sent"] for r in results) / wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2,4,8", help="collector actors per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--every-s", type=float, default=2.0, help="between the reader's reads")
    parser.add_argument("--batch", type=int, default=1000, help="spans per export")
    parser.add_argument("--max-spans", type=int, help="send only the first N spans (by end)")
    parser.add_argument("--run-file", type=Path, help="a replayed scale-16k run file to reuse")
    args = parser.parse_args()
    print("uptime:", uptime(), flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-lake-ray-"))
    file = args.run_file
    if file is None:
        file = tmp / "s16k.duckdb"
        subprocess.run([sys.executable, "-m", "rolloutscope", "scenario", "run", "scale-16k",
                        "--db", str(file)], check=True, capture_output=True)
    spans = load_spans(file, args.max_spans)
    print(f"scale-16k: sending {len(spans):,} spans "
          f"({sum(len(s['events']) for s in spans):,} events) per run", flush=True)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # node address 127.0.0.1
    import ray

    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False,
             _node_ip_address="127.0.0.1")
    try:
        for n in [int(x) for x in args.sizes.split(",")]:
            runs = [one_run(spans, n, f"ducklake:sqlite:{tmp / f'n{n}-{r}' / 'catalog.sqlite'}",
                            args) for r in range(args.repeats)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"N={n} actors, median of {args.repeats} (reads per run {med['reads']:.0f}): "
                  f"incidents read while writing {med['read_med']:.2f} s (p95 "
                  f"{med['read_p95']:.2f} s), idle {med['idle_med']:.2f} s (p95 "
                  f"{med['idle_p95']:.2f} s), ratio {med['read_med'] / med['idle_med']:.2f}; "
                  f"freshness {med['fresh_med']:.2f} s (p95 {med['fresh_p95']:.2f} s); "
                  f"{med['spans_per_s']:,.0f} spans/s; failed {max(r['failed'] for r in runs)}, "
                  f"lost {max(r['lost'] for r in runs)}", flush=True)
    finally:
        ray.shutdown()
    print("uptime:", uptime(), flush=True)


if __name__ == "__main__":
    main()
