"""What a replay found, as records: how it diverged from its capture, or why it could not run.

A ``Divergence`` says what was compared (``kind``, ``subject``), what the capture showed
(``expected``) and what the replay did (``observed``), and carries the sentence a report prints
(``message``, also its ``str``). A ``ReplayFailure`` is a replay that did not run: the error's
type, its message, and the same ``"Type: message"`` line. ``ReplayRunResult`` holds these; its
``divergence`` and ``error`` are their rendered text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from rolloutscope.store.run_reads import IncidentKey


class DivergenceKind(StrEnum):
    INCIDENTS = "incidents"  # the incident multisets differ
    OUTCOMES = "outcomes"  # the outcome counts differ
    NONDETERMINISM = "nondeterminism"  # the same scenario and seed gave other spans


@dataclass(frozen=True, kw_only=True)
class Divergence:
    """One way a replay did not reproduce what was expected of it.

    ``expected``/``observed`` per kind: the incidents the capture had and the replay lacks /
    the ones only the replay has; the captured / replayed value of each outcome count that
    differs (name, value pairs); the first run's / the second run's span digest.
    """

    kind: DivergenceKind
    subject: str
    expected: tuple[object, ...]
    observed: tuple[object, ...]
    message: str

    def __str__(self) -> str:
        return self.message

    @classmethod
    def incidents(cls, vanished: Sequence[IncidentKey],
                  appeared: Sequence[IncidentKey]) -> Divergence:
        return cls(kind=DivergenceKind.INCIDENTS, subject="incidents",
                   expected=tuple(vanished), observed=tuple(appeared),
                   message="incidents differ: " + ", ".join(
                       [f"{k} ({s}) vanished" for k, s in vanished]
                       + [f"{k} ({s}) appeared" for k, s in appeared]))

    @classmethod
    def outcomes(cls, diffs: Mapping[str, tuple[int, int]]) -> Divergence:
        return cls(kind=DivergenceKind.OUTCOMES, subject="outcome counts",
                   expected=tuple((name, a) for name, (a, _) in diffs.items()),
                   observed=tuple((name, b) for name, (_, b) in diffs.items()),
                   message="outcome counts differ: " + ", ".join(
                       f"{name} {a} -> {b}" for name, (a, b) in diffs.items()))

    @classmethod
    def nondeterminism(cls, digest: str, again: str) -> Divergence:
        return cls(kind=DivergenceKind.NONDETERMINISM, subject="spans",
                   expected=(digest,), observed=(again,),
                   message=f"nondeterministic: the same scenario and seed gave different "
                           f"spans on a second run (digest {digest} vs {again}); a "
                           f"participant reads time or randomness outside the runtime")


@dataclass(frozen=True, kw_only=True)
class ReplayFailure:
    """A replay that could not run: a plug-in that does not fit, a scenario that is invalid."""

    error_type: str
    message: str

    def __str__(self) -> str:
        return f"{self.error_type}: {self.message}"

    @classmethod
    def of(cls, exc: BaseException) -> ReplayFailure:
        return cls(error_type=type(exc).__name__, message=str(exc))
