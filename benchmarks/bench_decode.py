"""Decode alone, in one process: the compiled trace decoder against the Python reference
decoder on the same bodies (bench_collector.py's 1,000-span Gym-like requests, and the
captured Gym 0.7.0 deployment), each up to the Arrow tables the writer inserts (the compiled
decoder builds the spans' Arrow buffers itself; the reference's rows are converted by
``RowBatch.arrow``). Nothing is committed. Median of ``--repeats``.
Run:  .venv/bin/python benchmarks/bench_decode.py
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_collector import make_batch  # noqa: E402

from rolloutscope.collectors.otlp import fastdecode  # noqa: E402
from rolloutscope.collectors.otlp.decode import PROTOBUF, decode_request, parse_request  # noqa: E402
from rolloutscope.collectors.otlp.limits import DecodeLimits  # noqa: E402
from rolloutscope.collectors.otlp.signals import Signal  # noqa: E402

GYM = Path(__file__).parents[1] / "tests" / "fixtures" / "gym-0.7.0-otlp-http"


def per_span_us(decode, bodies: list[bytes], spans: int, rounds: int) -> float:
    t = time.perf_counter()
    for _ in range(rounds):
        for body in bodies:
            decode(body)
    return (time.perf_counter() - t) / (rounds * spans) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    assert fastdecode.available(), fastdecode.unavailable
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    limits = DecodeLimits()

    def python(body: bytes):
        return decode_request(Signal.TRACES, parse_request(Signal.TRACES, body, PROTOBUF), limits)

    def to_arrow(decoded) -> None:
        for table in ("spans", "span_events", "span_links"):
            decoded.batch.arrow(table)

    def python_to_arrow(body: bytes) -> None:
        to_arrow(python(body))

    def compiled_to_arrow(body: bytes) -> None:
        decoded = fastdecode.decode_traces(body, limits)
        assert decoded is not None
        to_arrow(decoded)

    for label, bodies, rounds in (
            ("1,000-span Gym-like requests", [make_batch(s) for s in range(5)], 4),
            ("captured Gym 0.7.0 traces", [p.read_bytes() for p in
                                           sorted(GYM.glob("*-traces-pb.bin"))], 40)):
        spans = python(bodies[0]).accepted if len(bodies) == 1 else sum(
            python(b).accepted for b in bodies)
        py = [per_span_us(python_to_arrow, bodies, spans, rounds) for _ in range(args.repeats)]
        c = [per_span_us(compiled_to_arrow, bodies, spans, rounds) for _ in range(args.repeats)]
        print(f"{label}: python {statistics.median(py):.2f} µs/span, compiled "
              f"{statistics.median(c):.2f} µs/span (body to Arrow tables, no commit); "
              f"ratio {statistics.median(py) / statistics.median(c):.1f}x")


if __name__ == "__main__":
    main()
