"""The fleet wrapper's one-shard reads: after a call it reads only the shard the call names, and
the whole snapshot only when that shard moved. Checked against the slow reference (the same
wrapper on the same model with its one-shard accessor hidden, so it diffs a whole snapshot after
every call) and against the model's own transition observer, over random call sequences."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rolloutscope.collectors.instrument import ObservedFleetHealth
from rolloutscope.replay.participants.fleet_health import (
    FleetHealthConfig,
    GenerationFleetHealth,
    Transition,
    UnknownShardError,
)
from rolloutscope.vocabulary import Attr, EventName, SpanName

S = 10**9


class Recorder:
    """A tracer whose finished spans are kept in memory, and a clock the test moves."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = provider.get_tracer("tests.instrument.one_shard")
        self.t = 1_800_000_000 * S

    def time_ns(self) -> int:
        return self.t

    def spans(self) -> list[tuple[Any, ...]]:
        """Every finished span without its ids: name, times, attributes, events, parent."""
        names = {}
        out = []
        for span in self.exporter.get_finished_spans():
            names[span.context.span_id] = span.name
            attrs = {k: v for k, v in span.attributes.items()
                     if k not in (Attr.OPEN_MARKER_FOR, Attr.OPEN_MARKER_PARENT)}
            events = [(e.name, e.timestamp, dict(e.attributes)) for e in span.events]
            parent = names.get(span.parent.span_id) if span.parent is not None else None
            out.append((span.name, span.start_time, span.end_time, attrs, events, parent,
                        Attr.OPEN_MARKER_FOR in span.attributes))
        return out

    def transitions(self) -> list[dict[str, Any]]:
        return [dict(e.attributes) for span in self.exporter.get_finished_spans()
                for e in span.events if e.name == EventName.FLEET_TRANSITION]


class WholeSnapshotsOnly:
    """The model seen through the real API alone: no ``shard(idx)``, so the wrapper cannot read
    one shard and diffs a whole snapshot after every call (the reference)."""

    _API = ("record_probe", "report_failure", "report_success", "mark_restarting",
            "mark_loaded", "report_refit", "retire", "snapshot", "serving_shards")

    def __init__(self, model: GenerationFleetHealth) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:
        if name not in self._API:
            raise AttributeError(name)
        return getattr(self._model, name)

    @property
    def membership_epoch(self) -> int:
        return self._model.membership_epoch


def _model(shards: int, config: FleetHealthConfig, seen: list[Transition] | None = None):
    urls = [f"http://gen-{i}:7000/v1" for i in range(shards)]
    return GenerationFleetHealth(num_shards=shards, config=config, clock=lambda: 0.0,
                                 base_urls=urls, observer=seen.append if seen is not None else None)


# one step: (kind, shard index, argument, keyword form); kinds other than the API's:
# "tick" opens or closes a probe_tick, "behind" makes the call on the model, behind the wrapper
_OPS = ("record_probe", "report_failure", "report_success", "mark_restarting", "mark_loaded",
        "report_refit", "retire")
steps = st.lists(st.tuples(
    st.sampled_from(_OPS + ("record_probe", "record_probe", "report_failure", "tick", "behind")),
    st.integers(min_value=-1, max_value=4),  # -1 and past the fleet: the model raises
    st.booleans(),
    st.booleans()), max_size=60)
configs = st.builds(FleetHealthConfig, unhealthy_threshold=st.integers(1, 3),
                    healthy_threshold=st.integers(1, 2),
                    max_restart_attempts_per_shard=st.integers(0, 2),
                    min_healthy_shards=st.just(0))


def _call(target: Any, op: str, idx: int, flag: bool, keyword: bool, step: int) -> None:
    error = RuntimeError(f"step {step}") if step % 2 else "is_alive timed out"
    if op == "record_probe":  # flag: the probe's result
        if keyword:
            args, kwargs = (), {"idx": idx, "ok": flag, **({} if flag else {"error": error})}
        else:
            args, kwargs = ((idx, True) if flag else (idx, False, error)), {}
    elif op == "report_failure":
        args, kwargs = ((), {"idx": idx, "error": error}) if keyword else ((idx, error), {})
    elif op == "report_refit":
        args, kwargs = (idx, step), {}
    elif op == "retire":
        args, kwargs = (idx, f"operator at step {step}"), {}
    else:
        args, kwargs = ((), {"idx": idx}) if keyword else ((idx,), {})
    try:
        getattr(target, op)(*args, **kwargs)
    except UnknownShardError:
        assert not 0 <= idx < len(target.snapshot().shards)


def _drive(shards: int, config: FleetHealthConfig, script: list, *, exclusive: bool):
    """The script on the fast wrapper and on the reference, side by side."""
    seen: list[Transition] = []
    fast_model, slow_model = _model(shards, config, seen), _model(shards, config)
    fast_rec, slow_rec = Recorder(), Recorder()
    fast = ObservedFleetHealth(fast_model, tracer=fast_rec.tracer, exclusive=exclusive,
                               time_ns=fast_rec.time_ns, attributes={"run": "r"})
    slow = ObservedFleetHealth(WholeSnapshotsOnly(slow_model), tracer=slow_rec.tracer,
                               exclusive=exclusive, time_ns=slow_rec.time_ns,
                               attributes={"run": "r"})
    ticks: list = []
    for step, (op, idx, flag, keyword) in enumerate(script):
        fast_rec.t = slow_rec.t = fast_rec.t + S
        if op == "tick":
            if ticks:
                for tick in ticks:
                    tick.__exit__(None, None, None)
                ticks = []
            else:
                ticks = [fast.probe_tick(), slow.probe_tick()]
                for tick in ticks:
                    tick.__enter__()
        elif op == "behind":
            if exclusive:
                continue  # exclusive promises every change goes through the wrapper
            for model in (fast_model, slow_model):
                _call(model, "report_failure" if flag else "report_refit", idx, flag, False,
                      step)
        else:
            _call(fast, op, idx, flag, keyword, step)
            _call(slow, op, idx, flag, keyword, step)
    for tick in ticks:
        tick.__exit__(None, None, None)
    # one last call on each model's shards, so every change behind the back is seen
    for idx in range(shards):
        fast_rec.t = slow_rec.t = fast_rec.t + S
        fast.report_success(idx)
        slow.report_success(idx)
    assert fast.failures.count == slow.failures.count == 0, (fast.failures.last,
                                                            slow.failures.last)
    return fast, fast_rec, slow_rec, seen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shards=st.integers(1, 4), config=configs, script=steps)
def test_one_shard_reads_record_what_whole_snapshots_record(shards, config, script):
    fast, fast_rec, slow_rec, seen = _drive(shards, config, script, exclusive=True)
    assert fast_rec.spans() == slow_rec.spans()
    # and every transition the model made, with the model's own trigger, epoch and streaks
    expected = [{Attr.SHARD_IDX: t.shard, Attr.FLEET_PREVIOUS_STATE: t.previous_state.value,
                 Attr.FLEET_STATE: t.state.value, Attr.FLEET_TRIGGER: t.trigger.value,
                 Attr.FLEET_MEMBERSHIP_EPOCH: t.membership_epoch,
                 Attr.FLEET_PROBE_FAILURES: t.probe_failures,
                 Attr.FLEET_REPORTED_FAILURES: t.reported_failures,
                 Attr.FLEET_RESTART_ATTEMPTS: t.restart_attempts,
                 Attr.FLEET_WEIGHT_VERSION: t.weight_version,
                 Attr.FLEET_LAST_ERROR: t.last_error}
                for t in seen if t.previous_state is not None]
    recorded = [{k: e.get(k) for k in expected[0]} for e in fast_rec.transitions()] \
        if expected else fast_rec.transitions()
    assert recorded == expected


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shards=st.integers(1, 4), config=configs, script=steps)
def test_with_changes_behind_the_wrappers_back_one_shard_reads_record_the_same(
        shards, config, script):
    fast, fast_rec, slow_rec, _ = _drive(shards, config, script, exclusive=False)
    assert fast_rec.spans() == slow_rec.spans()
    # several changes behind the back between two calls collapse into one edge; the last
    # recorded state of each shard is the model's
    last = {idx: "healthy" for idx in range(shards)}
    for event in fast_rec.transitions():
        last[event[Attr.SHARD_IDX]] = event[Attr.FLEET_STATE]
    assert last == {s.dp_shard_idx: s.state.value for s in fast.wrapped.snapshot().shards}


class CountingSnapshots(GenerationFleetHealth):
    snapshots = 0

    def snapshot(self):
        self.snapshots += 1
        return super().snapshot()


def test_a_call_that_moves_nothing_reads_one_shard_and_no_snapshot():
    recorder = Recorder()
    model = CountingSnapshots(num_shards=8, config=FleetHealthConfig(unhealthy_threshold=2),
                              clock=lambda: 0.0)
    fleet = ObservedFleetHealth(model, tracer=recorder.tracer, time_ns=recorder.time_ns)
    assert model.snapshots == 1  # the wrap itself
    for idx in range(8):
        fleet.report_success(idx)
        fleet.record_probe(idx, True)
    assert model.snapshots == 1
    assert len([s for s in recorder.spans() if s[0] == SpanName.FLEET_CALL]) == 8
    fleet.report_failure(3, "boom")  # healthy -> suspect: the whole fleet is read once
    assert model.snapshots == 2
    assert [e[Attr.FLEET_STATE] for e in recorder.transitions()] == ["suspect"]


class Shuffled(GenerationFleetHealth):
    """A ``shard(idx)`` that answers for another shard than the snapshot holds at ``idx``."""

    def shard(self, idx):
        return super().shard((idx + 1) % len(self.snapshot().shards))


@pytest.mark.parametrize("make", [
    Shuffled,
    # shards listed out of index order in the snapshot
    lambda **kw: type("Reversed", (GenerationFleetHealth,), {
        "snapshot": lambda self: (lambda s: type(s)(s.at, s.membership_epoch,
                                                    s.min_healthy_shards, s.shards[::-1]))(
            GenerationFleetHealth.snapshot(self))})(**kw),
])
def test_a_shard_accessor_that_disagrees_with_the_snapshot_is_not_trusted(make):
    recorder = Recorder()
    model = make(num_shards=3, config=FleetHealthConfig(unhealthy_threshold=1),
                 clock=lambda: 0.0)
    model.report_failure(1, "before the wrap")  # shard 1 dead: the accessor disagrees
    fleet = ObservedFleetHealth(model, tracer=recorder.tracer, time_ns=recorder.time_ns)
    fleet.record_probe(0, False, "is_alive timed out")
    fleet.report_failure(2, "router: 1 failed request(s)")
    moved = sorted((e[Attr.SHARD_IDX], e[Attr.FLEET_STATE]) for e in recorder.transitions())
    assert moved == [(0, "dead"), (2, "dead")]
    assert fleet.failures.count == 0
