"""The controller's rollout rules: failure taxonomy, retry budgets, row re-dispatch, stall watchdog.

Pure rules of ``rollout_manager.py`` / ``failures.py`` (docs/domain/rollouts-and-deadlines.md): a
failure is INFRA or DATA (HTTP status decides for HTTP errors: >= 500, 408 and 429 are infra, any
other 4xx is data; anything unrecognised is data); each prompt group has independent infra and data
budgets; an infra retry waits ``min(base * 2**(k-1), max)``, a data retry does not wait; the stall
watchdog's progress is the pair (committed groups, train steps), and it reports a stall only while
work remains. The controller loop that drives these lives in the engine (``replay/sim``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rolloutscope.vocabulary import FailureClass, StallAction


class FailureReason(StrEnum):
    """Exception classes the Gym path raises (the ``reason`` in metrics and spans)."""

    ROLLOUT_TIMEOUT = "RolloutTimeout"
    GYM_TRANSPORT_ERROR = "GymTransportError"
    ROLLOUT_DATA_FAILURE = "RolloutDataFailure"
    GENERATION_UNAVAILABLE = "GenerationUnavailable"


INFRA_REASONS = frozenset({FailureReason.ROLLOUT_TIMEOUT, FailureReason.GYM_TRANSPORT_ERROR,
                           FailureReason.GENERATION_UNAVAILABLE})


def http_status_is_infra(status: int) -> bool:
    return status >= 500 or status in (408, 429)


@dataclass(frozen=True, slots=True)
class Failure:
    reason: FailureReason
    failure_class: FailureClass
    detail: str
    http_status: int | None = None


def classify_http(status: int, detail: str) -> Failure:
    """``_typed_gym_failure``: an HTTP failure inside the Gym actor, typed by its status."""
    if http_status_is_infra(status):
        return Failure(FailureReason.GYM_TRANSPORT_ERROR, FailureClass.INFRA,
                       f"NeMo-Gym /run failed with HTTP {status}: {detail}", status)
    return Failure(FailureReason.ROLLOUT_DATA_FAILURE, FailureClass.DATA,
                   f"NeMo-Gym /run failed with HTTP {status}: {detail}", status)


def classify(reason: FailureReason, detail: str) -> Failure:
    cls = FailureClass.INFRA if reason in INFRA_REASONS else FailureClass.DATA
    return Failure(reason, cls, detail)


def rollout_timeout(budget_s: float) -> Failure:
    return classify(FailureReason.ROLLOUT_TIMEOUT,
                    f"NeMo-Gym prompt group exceeded {budget_s:g}s")


def missing_rows(missing: list[int], n: int, attempts: int) -> Failure:
    return classify(FailureReason.GYM_TRANSPORT_ERROR,
                    f"NeMo-Gym rollout stream ended before all rows arrived; missing rows "
                    f"{missing} of {n} after {attempts} attempt(s)")


class Verdict(StrEnum):
    RETRY = "retry"
    DROP = "drop"  # infra budget spent, under the consecutive-drop cap: skip the prompt
    SKIP = "skip"  # data budget spent, under max_skipped_prompts
    RAISE = "raise"  # terminal: RolloutRedispatchExhausted, or the data error propagates


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    backoff_s: float = 0.0


class PromptBudget:
    """Per prompt group: independent infra and data attempt counters
    (docs/domain/rollouts-and-deadlines.md#budgets)."""

    __slots__ = ("max_infra", "max_data", "base_s", "max_backoff_s", "infra", "data")

    def __init__(self, *, max_infra: int, max_data: int, backoff_base_s: float,
                 max_backoff_s: float) -> None:
        self.max_infra, self.max_data = max_infra, max_data
        self.base_s, self.max_backoff_s = backoff_base_s, max_backoff_s
        self.infra = 0  # failed infra attempts so far
        self.data = 0

    def backoff_s(self, k: int) -> float:
        """Delay before infra attempt k+1: 1, 2, 4, 8 ... capped."""
        return min(self.base_s * 2 ** (k - 1), self.max_backoff_s)

    def record(self, failure: Failure) -> Verdict | float:
        """Count a failed attempt: the backoff before the retry, or the verdict when spent."""
        if failure.failure_class is FailureClass.INFRA:
            self.infra += 1
            if self.infra >= self.max_infra:
                return Verdict.DROP
            return self.backoff_s(self.infra)
        self.data += 1
        if self.data >= self.max_data:
            return Verdict.SKIP
        return 0.0


class RunBudget:
    """Run-wide caps: consecutive infra drops (reset by any commit) and data skips."""

    def __init__(self, *, max_consecutive_dropped: int, max_skipped: int) -> None:
        self.max_consecutive_dropped = max_consecutive_dropped
        self.max_skipped = max_skipped
        self.consecutive_drops = 0
        self.max_consecutive_drops_seen = 0
        self.skipped = 0

    def committed(self) -> None:
        self.consecutive_drops = 0

    def decide(self, budget: PromptBudget, failure: Failure) -> Decision:
        outcome = budget.record(failure)
        if not isinstance(outcome, Verdict):
            return Decision(Verdict.RETRY, outcome)
        if outcome is Verdict.DROP:
            self.consecutive_drops += 1
            self.max_consecutive_drops_seen = max(self.max_consecutive_drops_seen,
                                                  self.consecutive_drops)
            if self.consecutive_drops > self.max_consecutive_dropped:
                return Decision(Verdict.RAISE)  # RolloutRedispatchExhausted
            return Decision(Verdict.DROP)
        self.skipped += 1
        if self.skipped > self.max_skipped:
            return Decision(Verdict.RAISE)  # the data error propagates
        return Decision(Verdict.SKIP)


class RowDispatch:
    """Rows of one RL try: ``_run_rollouts`` re-sends only the missing rows, up to a cap."""

    __slots__ = ("n", "max_row_attempts", "row_attempt", "received", "outstanding")

    def __init__(self, n: int, max_row_attempts: int) -> None:
        self.n = n
        self.max_row_attempts = max_row_attempts
        self.row_attempt = 1
        self.received: set[int] = set()
        self.outstanding = n  # rows of the current dispatch whose stream item is still due

    def receive(self, row: int) -> bool:
        """A row arrived; True when the group is complete."""
        self.received.add(row)
        return len(self.received) == self.n

    def missing(self) -> list[int]:
        return [r for r in range(self.n) if r not in self.received]

    def can_redispatch(self) -> bool:
        return self.row_attempt < self.max_row_attempts

    def redispatch(self) -> list[int]:
        self.row_attempt += 1
        rows = self.missing()
        self.outstanding = len(rows)
        return rows


@dataclass(frozen=True, slots=True)
class Stall:
    idle_s: float
    inflight: int
    committed: int
    train_steps: int
    max_steps: int
    stall_timeout_s: float
    action: StallAction

    def message(self) -> str:
        return (f"WARNING: rollout stall -- no rollout committed and no train step completed "
                f"in {self.idle_s:.0f}s ({self.inflight} rollouts in flight, {self.committed} "
                f"groups committed, step {self.train_steps}/{self.max_steps}, "
                f"stall_timeout_s={self.stall_timeout_s:g})")


class StallWatchdog:
    """``_stall_watchdog_pump``: progress is (committed, train_steps); idle_s since it moved."""

    def __init__(self, *, stall_timeout_s: float, max_steps: int,
                 action: StallAction = StallAction.WARN, now: float = 0.0) -> None:
        self.stall_timeout_s = stall_timeout_s
        self.max_steps = max_steps
        self.action = action
        self._progress = (0, 0)
        self._since = now

    def idle_s(self, now: float) -> float:
        """Time since progress last moved, as of the last tick (``rollout/idle_s``)."""
        return now - self._since

    def tick(self, *, now: float, committed: int, train_steps: int, inflight: int
             ) -> Stall | None:
        progress = (committed, train_steps)
        if progress != self._progress:
            self._progress, self._since = progress, now
        idle = now - self._since
        # an idle controller with nothing left to do is not stalled, in flight or not
        if train_steps < self.max_steps and idle > self.stall_timeout_s:
            return Stall(idle, inflight, committed, train_steps, self.max_steps,
                         self.stall_timeout_s, self.action)
        return None
