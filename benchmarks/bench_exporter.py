"""Instrumented-process cost per span: BatchSpanProcessor -> discarding exporter (baseline) vs
BatchSpanProcessor -> the DuckDB run-store exporter, at a sustained 20k spans/s and flat out.

The store exporter runs twice: with the compiled span encoder (the default) and with the Python
encoder it falls back to (``store-py``, what the exporter cost before the compiled one).

Cost is the whole process's CPU time (every thread: the caller, the processor's worker, the
store's writer and DuckDB's own) from the first span created until the last one is committed,
divided by the spans created. Each figure is the median of --repeats runs.

    .venv/bin/python benchmarks/bench_exporter.py [--seconds 5] [--rate 20000] [--repeats 3]

Target: ratio (store / discard) <= 1.3 and exported/created = 1.0 at 20k spans/s.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from rolloutscope.collectors import exporter as exporter_module
from rolloutscope.collectors.exporter import (
    DEFAULT_MAX_EXPORT_BATCH_SIZE,
    DEFAULT_MAX_QUEUE_SIZE,
    DEFAULT_SCHEDULE_DELAY_MS,
    StoreSpanExporter,
)
from rolloutscope.store import RunStore
from rolloutscope.vocabulary import Attr, EventName, SpanName


class DiscardingExporter(SpanExporter):
    def __init__(self) -> None:
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _emit(tracer, i: int) -> None:
    """One realistic rollout-side span: join keys, a few counters, sometimes an event."""
    with tracer.start_as_current_span(SpanName.RL_ATTEMPT, attributes={
        Attr.ROLLOUT_ID: f"p{i % 16000}-0", Attr.PROMPT_IDX: i % 16000, Attr.RL_ATTEMPT: 0,
        Attr.GROUP_ID: f"g{i}", Attr.ROLLOUT_OUTCOME: "committed", Attr.WEIGHT_VERSION: 12,
        Attr.TOKENS_IN: 812, Attr.TOKENS_OUT: 2048,
    }) as span:
        if i % 4 == 0:
            span.add_event(EventName.ROW_RECEIVED, {Attr.ROW_IDX: 0})


@contextlib.contextmanager
def python_encoder(on: bool) -> Iterator[None]:
    """Exporters made inside encode every span with the Python loop (as without the compiled
    encoder built)."""
    compiled = exporter_module._compiled
    if on:
        exporter_module._compiled = None
    try:
        yield
    finally:
        exporter_module._compiled = compiled


def run_once(kind: str, n: int, rate: float | None, sdk_defaults: bool = False) -> dict:
    with python_encoder(kind == "store-py"):
        return _run_once("store" if kind == "store-py" else kind, n, rate, sdk_defaults)


def _run_once(kind: str, n: int, rate: float | None, sdk_defaults: bool = False) -> dict:
    tmp = tempfile.mkdtemp(prefix="rs-bench-")
    store = None
    if kind == "store":
        store = RunStore(Path(tmp) / "run.duckdb", threads=1)  # as instrument() opens it
        exporter: SpanExporter = StoreSpanExporter(store)
    else:
        exporter = DiscardingExporter()
    if sdk_defaults:
        processor = BatchSpanProcessor(exporter, max_queue_size=2048, schedule_delay_millis=5000,
                                       max_export_batch_size=512)
    else:
        processor = BatchSpanProcessor(exporter, max_queue_size=DEFAULT_MAX_QUEUE_SIZE,
                                       schedule_delay_millis=DEFAULT_SCHEDULE_DELAY_MS,
                                       max_export_batch_size=DEFAULT_MAX_EXPORT_BATCH_SIZE)
    provider = TracerProvider(resource=Resource.create({"service.name": "bench",
                                                        Attr.RUN_ID: "bench"}))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")

    cpu0, wall0 = time.process_time(), time.perf_counter()
    if rate is None:
        for i in range(n):
            _emit(tracer, i)
    else:
        tick = 0.005
        per_tick = max(1, int(rate * tick))
        next_at = time.perf_counter()
        i = 0
        while i < n:
            for _ in range(min(per_tick, n - i)):
                _emit(tracer, i)
                i += 1
            next_at += tick
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    create_wall = time.perf_counter() - wall0
    provider.force_flush(120_000)
    if store is not None:
        exporter.force_flush(120_000)
    cpu = time.process_time() - cpu0
    if store is not None:
        exported = store.query("SELECT count(*) FROM spans")[0][0]
        provider.shutdown()
        store.close()
    else:
        exported = exporter.exported
        provider.shutdown()
    return {"us_per_span": cpu / n * 1e6, "exported_ratio": exported / n,
            "achieved_rate": n / create_wall}


def median_of(kind: str, n: int, rate: float | None, repeats: int, **kw) -> dict:
    runs = [run_once(kind, n, rate, **kw) for _ in range(repeats)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=20_000.0)
    ap.add_argument("--flat-out-spans", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n_paced = int(args.seconds * args.rate)

    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"paced: {n_paced:,} spans at {args.rate:,.0f}/s; flat out: {args.flat_out_spans:,} "
          f"spans; median of {args.repeats}")
    results = {}
    for label, n, rate in (("paced", n_paced, args.rate),
                           ("flat-out", args.flat_out_spans, None)):
        runs: dict[str, list[dict]] = {"discard": [], "store": [], "store-py": []}
        for _ in range(args.repeats):  # interleaved: a load change hits all three alike
            for kind, samples in runs.items():
                samples.append(run_once(kind, n, rate))
        base, store, store_py = ({key: statistics.median(r[key] for r in samples)
                                  for key in samples[0]} for samples in runs.values())
        results[label] = (base, store)
        print(f"{label:>9}: discard {base['us_per_span']:6.2f} us/span | "
              f"store {store['us_per_span']:6.2f} us/span | "
              f"ratio {store['us_per_span'] / base['us_per_span']:.2f} | "
              f"exported/created {store['exported_ratio']:.4f} | "
              f"achieved {store['achieved_rate']:,.0f} spans/s")
        print(f"{'':>9}  store-py {store_py['us_per_span']:6.2f} us/span | ratio "
              f"{store_py['us_per_span'] / base['us_per_span']:.2f} (the Python encoder) | "
              f"compiled saves {store_py['us_per_span'] - store['us_per_span']:.2f} us/span")
    sdk = median_of("discard", n_paced, args.rate, 1, sdk_defaults=True)
    print(f"SDK default BatchSpanProcessor at {args.rate:,.0f}/s: exported/created "
          f"{sdk['exported_ratio']:.4f}")
    base, store = results["paced"]
    ratio = store["us_per_span"] / base["us_per_span"]
    ok = ratio <= 1.3 and store["exported_ratio"] == 1.0
    print(f"RESULT paced ratio {ratio:.2f} (target <= 1.30), exported/created "
          f"{store['exported_ratio']:.4f} (target 1.0): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
