"""A virtual-time runtime for real asyncio participant code.

Real participants (NeMo-RL's ``_Deadline``, NeMo-Gym's checkpoint control plane and agent
participant) are coroutines that wait on ``asyncio`` events, ``asyncio.timeout``,
``asyncio.wait_for`` and ``asyncio.sleep``, and compare ``time.time()`` with absolute deadlines.
``AsyncRuntime`` runs them on an event loop whose clock *is* the engine's virtual clock, so a
300 s prepare wait costs microseconds and the same scenario and seed give the same spans.

How time flows. ``VirtualTimeLoop.time()`` returns the engine's ``ManualClock``; the loop never
polls a selector and never sleeps. Its timers (every ``call_at``: timeouts, sleeps, ``wait_for``)
are bridged into the engine: after each settle the runtime keeps one engine event at the loop's
earliest timer, at ``Priority.DEADLINE`` -- loop timers fire after the instant's work, as the
reference deadlines do, so a result that arrives at the instant a deadline is due counts as in
time. Between events the engine calls ``settle()`` (through the adapters) to run whatever its
calls made ready; code on the loop never calls into the engine synchronously, it ``post``s an
engine event at the current instant. That keeps the interleaving a pure function of the event
order.

How participant code reads the clock. Inside the modules a participant is registered with
(``register(name, modules=("nemo_gym.",))``), the global ``time`` is replaced, while the runtime
runs their code, by a proxy whose ``time()`` is ``epoch_s`` plus virtual time and whose
``monotonic``/``perf_counter`` are virtual time (names imported ``from time`` are replaced the
same way). Patching the participant's own module globals, rather than the process-wide ``time``
functions (what ``time-machine`` does), leaves the OTel SDK, the store writer's thread and the
runtime's own watchdog on the real clock, and needs no C-level hook; it is undone after every
settle, so nothing outside the runtime ever sees virtual time.

What is caught. ``time.sleep`` in a registered module raises ``WallClockSleepError`` naming the
participant; any loop callback that holds the thread longer than ``stall_limit_s`` of wall time
(blocking I/O, a sleep the proxy cannot see) is a ``WallClockStallError`` naming the participant
and the coroutine; work posted from another thread is a ``ForeignThreadError``. ``to_thread`` and
``run_in_executor`` run inline, at the current instant: a thread would make the interleaving
depend on the OS scheduler. Their wall time (Gym's commit writes and fsyncs its records there)
is blocking work the participant meant to offload, so it does not count as a stall.
"""

from __future__ import annotations

import asyncio
import heapq
import sys
import threading
import time as _real_time
from asyncio import events
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import Future as _ConcurrentFuture
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from rolloutscope.replay.event_engine import Priority, Scheduler, Timer
from rolloutscope.replay.errors import ReplayError

_wall = _real_time.perf_counter  # the watchdog's clock: never the virtual one
_REAL_TIME_FUNCS = {"time": _real_time.time, "time_ns": _real_time.time_ns,
                    "monotonic": _real_time.monotonic, "monotonic_ns": _real_time.monotonic_ns,
                    "perf_counter": _real_time.perf_counter,
                    "perf_counter_ns": _real_time.perf_counter_ns, "sleep": _real_time.sleep}
MAX_CALLBACKS_PER_SETTLE = 2_000_000


# -- errors -------------------------------------------------------------------------------------
class VirtualTimeError(ReplayError):
    """Participant code did something the virtual-time runtime cannot replay faithfully."""

    def __init__(self, participant: str, detail: str) -> None:
        self.participant = participant
        super().__init__(f"participant {participant}: {detail}")


class WallClockSleepError(VirtualTimeError):
    """The participant called ``time.sleep``: real time would pass while virtual time stood."""

    def __init__(self, participant: str, seconds: float, where: str) -> None:
        self.seconds = seconds
        self.where = where
        super().__init__(participant, f"called time.sleep({seconds:g}) in {where}; on the "
                                      f"virtual clock wait with asyncio.sleep instead")


class WallClockStallError(VirtualTimeError):
    """One loop step held the thread for longer than the runtime allows, in wall time."""

    def __init__(self, participant: str, wall_s: float, limit_s: float, where: str) -> None:
        self.wall_s = wall_s
        self.where = where
        super().__init__(participant, f"{where} blocked the event loop for {wall_s:.3f} s of "
                                      f"wall time (limit {limit_s:g} s): blocking I/O or a "
                                      f"sleep outside asyncio")


class ForeignThreadError(VirtualTimeError):
    """Work was posted to the loop from another thread."""


class ParticipantTaskError(VirtualTimeError):
    """A participant's coroutine raised where nothing was waiting for its outcome."""

    def __init__(self, participant: str, what: str, error: BaseException) -> None:
        self.error = error
        super().__init__(participant, f"{what} raised {type(error).__name__}: {error}")


class RuntimeReentryError(ReplayError):
    """Engine code was called from the loop and called back into it (an adapter bug)."""


# -- the loop -----------------------------------------------------------------------------------
class VirtualTimeLoop(asyncio.BaseEventLoop):
    """An event loop whose ``time()`` is a ``ManualClock`` and which never waits for I/O.

    Only ``AsyncRuntime`` runs it (``run_ready``); ``run_forever`` is not used: nothing here
    would ever move the clock.
    """

    def __init__(self, clock: Any) -> None:
        super().__init__()
        self._vclock = clock
        self._owner_thread = threading.get_ident()
        self.foreign_posts: list[str] = []
        # wall time spent in inline executor work: blocking I/O the participant offloaded, as
        # real code does with to_thread, is not a stall of the loop
        self.offloaded_wall_s = 0.0

    def time(self) -> float:
        return self._vclock.t

    def next_timer(self) -> float | None:
        scheduled = self._scheduled
        while scheduled and scheduled[0]._cancelled:
            heapq.heappop(scheduled)._scheduled = False
            self._timer_cancelled_count = max(0, self._timer_cancelled_count - 1)
        if self._timer_cancelled_count > 100 and \
                self._timer_cancelled_count * 2 > len(scheduled):
            live = [h for h in scheduled if not h._cancelled]
            for h in scheduled:
                if h._cancelled:
                    h._scheduled = False
            heapq.heapify(live)
            self._scheduled = scheduled = live
            self._timer_cancelled_count = 0
        return scheduled[0]._when if scheduled else None

    def move_due_timers(self) -> int:
        """Move every timer due by now to the ready queue; how many moved."""
        now, scheduled, moved = self.time(), self._scheduled, 0
        while scheduled and scheduled[0]._when <= now:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            if handle._cancelled:
                self._timer_cancelled_count = max(0, self._timer_cancelled_count - 1)
                continue
            self._ready.append(handle)
            moved += 1
        return moved

    @property
    def has_ready(self) -> bool:
        return bool(self._ready)

    def pop_ready(self) -> asyncio.Handle | None:
        while self._ready:
            handle = self._ready.popleft()
            if not handle._cancelled:
                return handle
        return None

    # no selector, no self-pipe: the runtime drains the ready queue itself
    def _write_to_self(self) -> None:
        pass

    def _process_events(self, event_list: Any) -> None:  # pragma: no cover - never polled
        pass

    def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> Any:
        if threading.get_ident() != self._owner_thread:
            self.foreign_posts.append(getattr(callback, "__qualname__", repr(callback)))
        return super().call_soon_threadsafe(callback, *args, context=context)

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> Any:
        """Inline: ``to_thread`` work runs on the loop's thread, at the current instant."""
        self._check_closed()
        done: _ConcurrentFuture = _ConcurrentFuture()
        t0 = _wall()
        try:
            done.set_result(func(*args))
        except BaseException as exc:  # delivered to the awaiting coroutine, as a thread would
            done.set_exception(exc)
        finally:
            self.offloaded_wall_s += _wall() - t0
        return asyncio.wrap_future(done, loop=self)


# -- virtual time inside participant modules ------------------------------------------------------
class _TimeProxy:
    """What ``time`` is, inside a registered participant's modules, while the runtime runs."""

    def __init__(self, runtime: AsyncRuntime, participant: str) -> None:
        self._runtime = runtime
        self._participant = participant

    def time(self) -> float:
        return self._runtime.epoch_s + self._runtime.now

    def time_ns(self) -> int:
        return int(round(self.time() * 1e9))

    def monotonic(self) -> float:
        return self._runtime.now

    def monotonic_ns(self) -> int:
        return int(round(self._runtime.now * 1e9))

    perf_counter = monotonic
    perf_counter_ns = monotonic_ns

    def sleep(self, seconds: float) -> None:
        frame = sys._getframe(1)
        where = f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname}" \
            if hasattr(frame.f_code, "co_qualname") else frame.f_code.co_name
        error = WallClockSleepError(self._participant, seconds, where)
        self._runtime.violation(error)
        raise error

    def __getattr__(self, name: str) -> Any:
        return getattr(_real_time, name)


@dataclass
class _Registration:
    participant: str
    prefixes: tuple[str, ...]
    proxy: _TimeProxy


_REAL_TIME_NAMES = {id(real): name for name, real in _REAL_TIME_FUNCS.items()}


class _PatchPlan:
    """Which module globals hold ``time`` or one of its clock functions, in the registered
    modules: found once, and again only when a module is imported or a namespace grows (a
    settle runs at every engine event that touches the participants)."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._sizes: list[tuple[dict[str, Any], int]] = []
        self.targets: list[tuple[dict[str, Any], str, Any]] = []

    def current(self, registrations: list[_Registration]) -> list[tuple[dict[str, Any], str,
                                                                        Any]]:
        key = (len(sys.modules), len(registrations))
        if key != self._key or any(len(ns) != n for ns, n in self._sizes):
            self._rebuild(registrations)
            self._key = key
        return self.targets

    def _rebuild(self, registrations: list[_Registration]) -> None:
        self.targets, self._sizes = [], []
        modules = list(sys.modules.items())
        for reg in registrations:
            for name, module in modules:
                if not isinstance(module, ModuleType) or not name.startswith(reg.prefixes):
                    continue
                namespace = vars(module)
                self._sizes.append((namespace, len(namespace)))
                for global_name, value in list(namespace.items()):
                    if value is _real_time:
                        self.targets.append((namespace, global_name, reg.proxy))
                    elif id(value) in _REAL_TIME_NAMES and callable(value):
                        self.targets.append((namespace, global_name,
                                             getattr(reg.proxy, _REAL_TIME_NAMES[id(value)])))


class _Patches:
    """The module globals replaced while the runtime runs participant code."""

    def __init__(self) -> None:
        self.saved: list[tuple[dict[str, Any], str, Any]] = []

    def apply(self, targets: list[tuple[dict[str, Any], str, Any]]) -> None:
        for namespace, key, replacement in targets:
            self.saved.append((namespace, key, namespace[key]))
            namespace[key] = replacement

    def undo(self) -> None:
        for namespace, key, value in reversed(self.saved):
            namespace[key] = value
        self.saved.clear()


# -- the runtime --------------------------------------------------------------------------------
@dataclass
class Pending:
    """A participant coroutine the engine started: its outcome once it has finished."""

    participant: str
    what: str
    task: asyncio.Task

    @property
    def done(self) -> bool:
        return self.task.done()

    def result(self) -> Any:
        return self.task.result()

    @property
    def error(self) -> BaseException | None:
        if not self.task.done() or self.task.cancelled():
            return None
        return self.task.exception()


class AsyncRuntime:
    """Real async participant code on the engine's virtual clock (see the module docstring)."""

    def __init__(self, sched: Scheduler, *, epoch_s: float, stall_limit_s: float = 2.0,
                 priority: Priority = Priority.DEADLINE) -> None:
        self.sched = sched
        self.epoch_s = epoch_s
        self.stall_limit_s = stall_limit_s
        self.priority = priority
        self.loop = VirtualTimeLoop(sched.clock)
        self.loop.set_exception_handler(self._on_loop_exception)
        self._registrations: list[_Registration] = []
        self._plan = _PatchPlan()
        self._timer: Timer | None = None
        self._timer_at: float | None = None
        self._running = False
        self._errors: list[BaseException] = []
        self._after_settle: list[Callable[[], None]] = []
        self._owners: dict[asyncio.Task, str] = {}
        self.callbacks_run = 0
        self.closed = False

    @property
    def now(self) -> float:
        return self.sched.clock.t

    def wall_time(self, t: float | None = None) -> float:
        """The ``time.time()`` participant code sees at virtual time ``t`` (default: now)."""
        return self.epoch_s + (self.now if t is None else t)

    # -- registration -------------------------------------------------------------------------
    def register(self, participant: str, *, modules: Iterable[str]) -> None:
        """Run ``participant``'s code, in modules whose names start with any of ``modules``,
        on virtual time."""
        prefixes = tuple(modules)
        self._registrations.append(_Registration(participant, prefixes,
                                                 _TimeProxy(self, participant)))

    def on_settled(self, hook: Callable[[], None]) -> None:
        """``hook()`` runs after every settle, outside the loop: where an adapter notices what
        its participant did on its own (a lease expiring, a parked run released)."""
        self._after_settle.append(hook)

    # -- engine -> loop -------------------------------------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, Any], *, participant: str, what: str) -> Pending:
        """Start ``coro`` on the loop (it runs at the next settle)."""
        if self.closed:
            coro.close()
            raise ReplayError(f"the virtual-time runtime is closed; cannot start {what}")
        task = self.loop.create_task(coro)
        self._owners[task] = participant
        task.add_done_callback(self._owners.pop)
        return Pending(participant, what, task)

    def run(self, coro: Coroutine[Any, Any, Any], *, participant: str, what: str) -> Pending:
        """``spawn`` then ``settle``: the outcome, if it finished at this instant."""
        pending = self.spawn(coro, participant=participant, what=what)
        self.settle()
        return pending

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A synchronous call into participant code, inside the runtime's context (virtual
        time, this loop as the running one), then a settle for what it made ready."""
        with self.entered():
            result = fn(*args, **kwargs)
        self.settle()
        return result

    def settle(self) -> None:
        """Run every callback ready at the current instant; then re-arm the bridge timer."""
        self._drain(due_timers=False)

    # -- loop -> engine -------------------------------------------------------------------------
    def post(self, fn: Callable[..., Any], *args: Any,
             priority: Priority | None = None) -> None:
        """From code on the loop: run ``fn(*args)`` as an engine event at the current instant."""
        if not self.closed:
            self.sched.at(self.now, fn, *args,
                          priority=self.priority if priority is None else priority)

    def violation(self, error: VirtualTimeError) -> None:
        self._errors.append(error)

    # -- internals ------------------------------------------------------------------------------
    def _bridge(self) -> None:
        self._timer, self._timer_at = None, None
        self._drain(due_timers=True)

    def _drain(self, *, due_timers: bool) -> None:
        if self._running:
            error = RuntimeReentryError("the virtual-time runtime was entered from its own "
                                        "loop; code on the loop must post() engine work instead")
            self._errors.append(error)  # raised by the outer settle, whoever catches this one
            raise error
        if self.closed:
            return
        loop = self.loop
        with self.entered():
            budget = MAX_CALLBACKS_PER_SETTLE
            while True:
                if due_timers:
                    loop.move_due_timers()
                handle = loop.pop_ready()
                if handle is None:
                    break
                self._run_handle(handle)
                budget -= 1
                if budget <= 0:
                    raise VirtualTimeError(self._who(handle)[0], "the event loop never went "
                                           "idle at one virtual instant (a busy loop?)")
        self._raise_collected()
        for hook in list(self._after_settle):
            hook()
        self._arm()

    def _run_handle(self, handle: asyncio.Handle) -> None:
        t0, offloaded = _wall(), self.loop.offloaded_wall_s
        handle._run()
        self.callbacks_run += 1
        took = _wall() - t0 - (self.loop.offloaded_wall_s - offloaded)
        if took > self.stall_limit_s:
            participant, where = self._who(handle)
            self._errors.append(WallClockStallError(participant, took, self.stall_limit_s,
                                                    where))

    def _who(self, handle: asyncio.Handle) -> tuple[str, str]:
        callback = getattr(handle, "_callback", None)
        task = getattr(callback, "__self__", None)
        if isinstance(task, asyncio.Task):
            coro = task.get_coro()
            where = getattr(coro, "__qualname__", repr(coro))
            frame = getattr(coro, "cr_frame", None)
            module = frame.f_globals.get("__name__", "") if frame is not None else ""
            owner = self._owners.get(task) or self._participant_of(module)
            return owner, f"{module}.{where}" if module else where
        name = getattr(callback, "__qualname__", repr(callback))
        module = getattr(callback, "__module__", "") or ""
        return self._participant_of(module), name

    def _participant_of(self, module: str) -> str:
        for reg in self._registrations:
            if module.startswith(reg.prefixes):
                return reg.participant
        return "unknown"

    def _on_loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        error = context.get("exception")
        task = context.get("task") or context.get("future")
        owner = self._owners.get(task, "unknown") if isinstance(task, asyncio.Task) else "unknown"
        what = context.get("message", "a loop callback")
        if error is None:
            error = RuntimeError(what)
        self._errors.append(ParticipantTaskError(owner, what, error))

    def _raise_collected(self) -> None:
        if self.loop.foreign_posts:
            posted, self.loop.foreign_posts[:] = list(self.loop.foreign_posts), []
            self._errors.append(ForeignThreadError(
                self._participant_of(""), f"posted {', '.join(posted)} to the loop from "
                "another thread; a replay runs participant code on one thread"))
        if self._errors:
            first, self._errors = self._errors[0], []
            raise first

    def _arm(self) -> None:
        nxt = self.loop.next_timer()
        if nxt == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, None
        if nxt is not None:
            self._timer = self.sched.at(nxt, self._bridge, priority=self.priority)
            self._timer_at = nxt

    class _Entered:
        def __init__(self, runtime: AsyncRuntime) -> None:
            self.r = runtime
            self.patches = _Patches()
            self.previous: Any = None
            self.hooks: Any = None

        def __enter__(self) -> None:
            r = self.r
            r._running = True
            self.previous = events._get_running_loop()
            events._set_running_loop(r.loop)
            r.loop._thread_id = threading.get_ident()
            self.hooks = sys.get_asyncgen_hooks()
            sys.set_asyncgen_hooks(firstiter=r.loop._asyncgen_firstiter_hook,
                                   finalizer=r.loop._asyncgen_finalizer_hook)
            self.patches.apply(r._plan.current(r._registrations))

        def __exit__(self, *exc: Any) -> None:
            r = self.r
            self.patches.undo()
            sys.set_asyncgen_hooks(*self.hooks)
            r.loop._thread_id = None
            events._set_running_loop(self.previous)
            r._running = False

    def entered(self) -> AsyncRuntime._Entered:
        """A context in which participant code may be called synchronously: virtual time in
        its modules, this loop as the running one (``call`` uses it, then settles)."""
        return AsyncRuntime._Entered(self)

    def close(self) -> None:
        """Cancel what is still running (their ``finally`` blocks run) and close the loop."""
        if self.closed:
            return
        if self._timer is not None:
            self._timer.cancel()
        tasks = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for task in tasks:
            task.cancel()
        self._after_settle.clear()
        try:
            with self.entered():
                while (handle := self.loop.pop_ready()) is not None:
                    handle._run()
        finally:
            self._errors.clear()
            self.closed = True
            self.loop.close()


__all__ = ["AsyncRuntime", "ForeignThreadError", "ParticipantTaskError", "Pending",
           "RuntimeReentryError", "VirtualTimeError", "VirtualTimeLoop", "WallClockSleepError",
           "WallClockStallError"]
