"""NeMo-RL's ``_Deadline``, in the form RL actually has: an async context manager.

RL guards a prompt group's whole row stream with ``async with _Deadline(rollout_s, "NeMo-Gym
prompt group"):`` (``AsyncNemoGymRolloutImpl._run_rollouts``); on ``asyncio.timeout``'s clock it
cancels the guarded work and re-raises the expiry as ``RolloutTimeout``. ``RealDeadlines`` gives
the engine's controller the registry surface it speaks (``add``/``complete``/``cancel``/
``fire``/``suspend``/``resume``) while each deadline is the real class, entered by a coroutine
on the virtual-time runtime that awaits the engine's verdict on the guarded work:

- ``add`` enters ``deadline_cls(budget_s, description)`` (with ``registry=`` when one is plugged
  and the class takes it) around a future; ``complete``/``cancel`` resolve the future, the
  context manager exits and disarms its timeout;
- when the real timeout expires first, the context manager raises, and the adapter posts the
  expiry to the engine (``on_fire``), which ends the try as a deadline firing: the deadline
  fires itself, the engine never arms a timer of its own (``due_at()`` is None);
- ``suspend``/``resume`` call the plugged registry (``RequestDeadlineRegistry`` of RL 00420a1,
  or a user's with counted holders: it is given the holder when its methods take one). Without
  a registry, RL main's ``_Deadline`` cannot be suspended, and the call changes nothing.

The engine's deadline spans still need the time a deadline spent suspended and its budget left
when it ended, which ``_Deadline`` does not expose (no "started at", no "remaining"); those are
mirrored from the registry's ``suspended`` flag -- firing is always the real code's.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Hashable
from typing import Any

from rolloutscope.replay.participants.deadlines import Deadline, HolderChange
from rolloutscope.replay.virtual_time import AsyncRuntime, ParticipantTaskError
from rolloutscope.vocabulary import DeadlineHolder, DeadlineKind, DeadlineOutcome

# RL's descriptions, as they appear in the RolloutTimeout message
DESCRIPTIONS = {DeadlineKind.ROLLOUT: "NeMo-Gym prompt group",
                DeadlineKind.GENERATION: "generation turn", DeadlineKind.ENV: "environment step"}
PARTICIPANT = "deadline"


class _Abandoned(Exception):
    """The guarded work was given up (the try failed another way): the body raises this."""


class _Mirror(Deadline):
    """The engine's record of one real deadline; it never schedules a firing of its own."""

    __slots__ = ()

    def due_at(self) -> float | None:
        return None


def _is_expiry(error: BaseException) -> bool:
    """RL's relabelled expiry (``RolloutTimeout``, by name: the class is the user's RL's), or
    the bare ``TimeoutError`` of a deadline that does not relabel."""
    return isinstance(error, TimeoutError) or any(
        cls.__name__ == "RolloutTimeout" for cls in type(error).__mro__)


def _takes_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
               for p in params)


class RealDeadlines:
    """The controller's deadline registry, each deadline a real ``_Deadline``."""

    fires_itself = True

    def __init__(self, *, runtime: AsyncRuntime, deadline_cls: type, registry: Any = None,
                 counted: bool = False) -> None:
        self.runtime = runtime
        self.deadline_cls = deadline_cls
        self.registry = registry
        # the engine's counted-holders variant means nothing here: whether holders are counted
        # is the plugged registry's own behaviour (RL's branch registry keeps one flag)
        self.counted = counted
        self.on_fire: Callable[[Hashable], None] | None = None
        self._live: dict[Hashable, tuple[_Mirror, asyncio.Future, Any]] = {}
        self._fired: dict[Hashable, str] = {}
        self.expiries: list[str] = []  # each RolloutTimeout the real class raised, as text
        self.unsuspendable = 0  # suspends asked of a deadline class that cannot suspend
        takes_registry = "registry" in inspect.signature(deadline_cls).parameters
        if registry is not None and not takes_registry:
            patch = getattr(type(registry), "patch", None)
            if patch is None:
                raise TypeError(f"{deadline_cls.__qualname__} takes no registry: plug the "
                                f"registry-aware _Deadline (NeMo-RL 00420a1), or a registry "
                                f"whose patch(deadline_cls) makes it registry-aware")
            self.deadline_cls = deadline_cls = patch(deadline_cls)
        self._with_registry = registry is not None
        self._holder_args = registry is not None and _takes_argument(registry.suspend)
        runtime.register(PARTICIPANT, modules=tuple({deadline_cls.__module__,
                                                     type(registry).__module__}))

    # -- the registry surface -------------------------------------------------------------------
    @property
    def suspended(self) -> bool:
        return bool(getattr(self.registry, "suspended", False))

    @property
    def holders_count(self) -> int:
        if self.registry is None:
            return 0
        count = getattr(self.registry, "holders_count", None)
        return int(count) if count is not None else int(self.suspended)

    def live(self) -> tuple[Deadline, ...]:
        return tuple(m for m, _, _ in self._live.values())

    def add(self, key: Hashable, *, kind: DeadlineKind, budget_s: float) -> Deadline:
        now = self.runtime.now
        mirror = _Mirror(key, kind=kind, budget_s=budget_s, now=now, suspended=self.suspended)
        done: asyncio.Future = self.runtime.loop.create_future()
        description = DESCRIPTIONS.get(kind, str(kind))
        deadline = (self.deadline_cls(budget_s, description, registry=self.registry)
                    if self._with_registry else self.deadline_cls(budget_s, description))
        guard = self.runtime.spawn(
            self._guard(key, deadline, done), participant=PARTICIPANT,
            what=f"{self.deadline_cls.__qualname__}({budget_s:g}, {description!r})")
        self._live[key] = (mirror, done, guard)
        self.runtime.settle()
        return mirror

    async def _guard(self, key: Hashable, deadline: Any, done: asyncio.Future) -> None:
        entered = False
        try:
            async with deadline:
                entered = True
                await done
        except _Abandoned:
            return
        except Exception as exc:
            if not (entered and _is_expiry(exc)):
                # not the deadline firing: the deadline code itself failed
                self.runtime.violation(ParticipantTaskError(
                    PARTICIPANT, f"{self.deadline_cls.__qualname__} for {key!r}", exc))
                return
            text = f"{type(exc).__name__}: {exc}"
            self.expiries.append(text)
            self._fired[key] = text
            self.runtime.post(self._announce, key)

    def _announce(self, key: Hashable) -> None:
        if key in self._live and self.on_fire is not None:
            self.on_fire(key)

    def _end(self, key: Hashable, outcome: DeadlineOutcome) -> Deadline:
        mirror, done, guard = self._live.pop(key)
        if not done.done():
            if guard.done:  # the guard already left (it fired): nobody awaits the future
                done.cancel()
            elif outcome is DeadlineOutcome.COMPLETED:
                done.set_result(None)
            else:
                done.set_exception(_Abandoned())
            self.runtime.settle()
        self._fired.pop(key, None)
        mirror._finish(self.runtime.now, outcome)
        return mirror

    def complete(self, key: Hashable) -> Deadline:
        return self._end(key, DeadlineOutcome.COMPLETED)

    def cancel(self, key: Hashable) -> Deadline:
        return self._end(key, DeadlineOutcome.CANCELLED)

    def fire(self, key: Hashable) -> Deadline:
        """The engine ending a try whose real deadline expired (after ``on_fire``)."""
        return self._end(key, DeadlineOutcome.FIRED)

    def suspend(self, holder: DeadlineHolder) -> HolderChange:
        return self._holders(holder, suspend=True)

    def resume(self, holder: DeadlineHolder) -> HolderChange:
        return self._holders(holder, suspend=False)

    def _holders(self, holder: DeadlineHolder, *, suspend: bool) -> HolderChange:
        if self.registry is None:
            self.unsuspendable += 1
            return HolderChange(holder, 0, ())
        was = self.suspended
        method = self.registry.suspend if suspend else self.registry.resume
        args = (holder.value,) if self._holder_args else ()
        self.runtime.call(method, *args)
        changed: list[Deadline] = []
        if was != self.suspended:
            now = self.runtime.now
            for mirror, _, _ in self._live.values():
                (mirror._suspend if suspend else mirror._resume)(now)
                changed.append(mirror)
        return HolderChange(holder, self.holders_count, tuple(changed))


def deadlines_from(deadline_cls: type, registry_cls: type | None = None) -> Callable[..., Any]:
    """The engine's deadline-registry factory for a real ``_Deadline`` class (and registry)."""

    def build(*, clock: Any = None, counted: bool = False, runtime: AsyncRuntime) -> RealDeadlines:
        registry = registry_cls() if registry_cls is not None else None
        return RealDeadlines(runtime=runtime, deadline_cls=deadline_cls, registry=registry,
                             counted=counted)

    return build
