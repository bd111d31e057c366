from __future__ import annotations

from collections.abc import Iterator

import pytest

from rolloutscope.collectors.exporter import Instrumentation, instrument

T0 = 1_800_000_000 * 10**9  # a fixed epoch, so expected times can be written as offsets
S = 10**9


class WallClock:
    """Epoch nanoseconds that move only when a test says so.

    Live, the exporter ships ended spans every 100 ms, so an interval's open marker and its end
    reach the store in different commits unless the interval is shorter than that. Advancing
    this clock passes such a boundary (``on_advance`` flushes), as the same time would live.
    """

    def __init__(self, t: int = T0, on_advance=None) -> None:
        self.t = t
        self._on_advance = on_advance

    def __call__(self) -> int:
        return self.t

    def advance(self, seconds: float) -> None:
        if self._on_advance is not None:
            self._on_advance()
        self.t += round(seconds * S)


class Run:
    """A real run store fed by the in-process exporter; ``view`` flushes, then reads."""

    def __init__(self, inst: Instrumentation) -> None:
        self.inst = inst
        self.tracer = inst.tracer("tests.instrument")

    def wall(self) -> WallClock:
        return WallClock(on_advance=self.inst.flush)

    def view(self, name: str):
        assert self.inst.flush()
        return self.inst.store.view(name).sort_values("start_ns", ignore_index=True)

    def events(self, name: str):
        assert self.inst.flush()
        return self.inst.store.query_df(
            "SELECT * FROM span_events WHERE name = ? ORDER BY ts_ns", [name])


@pytest.fixture
def run(tmp_path) -> Iterator[Run]:
    inst = instrument(tmp_path / "run.duckdb", service_name="controller", run_id="run-1")
    try:
        yield Run(inst)
    finally:
        inst.shutdown()
