"""Controller side of a replay: the rollout pump, deadlines, fences, ACKs, training, watchdog.

One ``PromptGroup`` per prompt runs RL tries (``generate_and_push`` iterations). Each try
reserves a group id, arms one rollout deadline over its whole row stream (row re-dispatches
included), and dispatches its rows to Gym once both admission fences (weight sync, Gym
checkpoint) are open. A deadline that fires stops RL reading the try; Gym keeps running it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Status, StatusCode

from rolloutscope.vocabulary import (
    AttemptOutcome,
    Attr,
    DeadlineHolder,
    DeadlineKind,
    EventName,
    FenceOwner,
    RolloutOutcome,
    SpanName,
    StallAction,
)
from rolloutscope.replay.engine import Priority, Timer
from rolloutscope.replay.participants.agent import CompletionReceipt
from rolloutscope.replay.participants.deadlines import Deadline, HolderChange
from rolloutscope.replay.participants.protocol import EpisodeId
from rolloutscope.replay.participants.rollouts import (
    Failure,
    PromptBudget,
    RowDispatch,
    RunBudget,
    StallWatchdog,
    Verdict,
    missing_rows,
    rollout_timeout,
)
from rolloutscope.replay.scenario import Prompt
from rolloutscope.replay.sim import services
from rolloutscope.replay.sim.gym import Run
from rolloutscope.replay.variants import Variant

if TYPE_CHECKING:
    from rolloutscope.replay.sim.world import World



ACK_RECEIPTS_PER_SPAN = 128  # the OTel SDK default OTEL_SPAN_EVENT_COUNT_LIMIT

class PromptGroup:
    __slots__ = ("prompt", "rollout_id", "span", "budget", "tries", "current", "episode_attempt")

    def __init__(self, prompt: Prompt, budget: PromptBudget) -> None:
        self.prompt = prompt
        self.rollout_id = f"p{prompt.idx:05d}"
        self.span: Any = None
        self.budget = budget
        self.tries = 0
        self.current: RLTry | None = None
        # the Gym episode attempt each row is dispatched at; a retired attempt moves it on
        self.episode_attempt = [0] * len(prompt.rows)


class RLTry:
    __slots__ = ("ctl", "group", "index", "span", "deadline", "deadline_span", "fire_timer",
                 "rows", "rows_span", "runs", "ended", "adopted")

    def __init__(self, ctl: ControllerSide, group: PromptGroup, index: int,
                 rows: RowDispatch) -> None:
        self.ctl = ctl
        self.group = group
        self.index = index
        self.span: Any = None
        self.deadline: Deadline | None = None
        self.deadline_span: Any = None
        self.fire_timer: Timer | None = None
        self.rows = rows
        self.rows_span: Any = None
        self.runs: list[Run] = []
        self.ended = False
        self.adopted = 0

    def attrs(self) -> dict[str, Any]:
        g = self.group
        return {Attr.PROMPT_IDX: g.prompt.idx, Attr.ROLLOUT_ID: g.rollout_id,
                Attr.RL_ATTEMPT: self.index}

    # RunOwner
    def on_row_done(self, run: Any, receipt: CompletionReceipt | None,
                    failure: Failure | None) -> None:
        self.ctl.row_done(self, run, receipt, failure)


class ControllerSide:
    def __init__(self, world: World) -> None:
        self.w = world
        cfg = world.scenario.config
        self.cfg = cfg
        self.run_budget = RunBudget(max_consecutive_dropped=cfg.rollout.max_consecutive_dropped_prompts,
                                    max_skipped=cfg.rollout.max_skipped_prompts)
        self.watchdog = StallWatchdog(stall_timeout_s=cfg.watchdog.stall_timeout_s,
                                      max_steps=cfg.training.max_num_steps,
                                      action=cfg.watchdog.stall_action)
        self.committed = 0
        self.train_steps = 0
        self._steps_started = 0
        self._trainer_busy_until = 0.0
        self.active: set[RLTry] = set()
        self._waiting: list[Callable[[], None]] = []  # dispatches held by a closed fence
        self.gym_fence: Any = None  # the open rl.admission.fence span while a snapshot holds it
        self._sync_fences = 0
        self._pending_acks: list[tuple[CompletionReceipt, int, int]] = []
        self._to_retire: list[Run] = []
        self._deadline_tries: dict[Any, RLTry] = {}
        self.raised: str | None = None
        self.dead_environment: str | None = None
        misses: dict[int, set[int]] = {}
        for miss in world.scenario.faults.refit_misses:
            misses.setdefault(miss.sync_index, set()).add(miss.shard)
        self._refit_misses = {k: frozenset(v) for k, v in misses.items()}

    # -- arrivals and dispatch ------------------------------------------------------------------
    def arrive(self, prompt: Prompt) -> None:
        ro = self.cfg.rollout
        group = PromptGroup(prompt, PromptBudget(
            max_infra=ro.max_infra_attempts_per_prompt, max_data=ro.max_data_attempts_per_prompt,
            backoff_base_s=ro.backoff_base_s, max_backoff_s=ro.max_backoff_s))
        group.span = self.w.tel.start(services.CONTROLLER, SpanName.RL_PROMPT, self.w.now, {
            Attr.PROMPT_IDX: prompt.idx, Attr.ROLLOUT_ID: group.rollout_id})
        self.request_dispatch(group)

    def fences_open(self) -> bool:
        return self.gym_fence is None and self._sync_fences == 0

    def request_dispatch(self, group: PromptGroup) -> None:
        self._when_fences_open(partial(self._dispatch, group))

    def _when_fences_open(self, dispatch: Callable[[], None]) -> None:
        if self.raised is not None:
            return
        if self.fences_open():
            dispatch()
        else:
            self._waiting.append(dispatch)

    def _reopened(self) -> None:
        if not self.fences_open():
            return
        waiting, self._waiting = self._waiting, []
        for dispatch in waiting:
            self._when_fences_open(dispatch)

    def _dispatch(self, group: PromptGroup) -> None:
        w, now = self.w, self.w.now
        t = RLTry(self, group, group.tries,
                  RowDispatch(len(group.prompt.rows), self.cfg.rollout.max_row_attempts))
        group.tries += 1
        group.current = t
        self.active.add(t)
        ids = t.attrs()
        t.span = w.tel.start(services.CONTROLLER, SpanName.RL_ATTEMPT, now, {
            **ids, Attr.GROUP_ID: f"{group.rollout_id}-g{t.index}",
            Attr.TARGET_STEP: self.train_steps}, group.span)
        budget = self.cfg.rollout.rollout_timeout_s
        if budget is not None:
            d = t.deadline = w.deadlines.add((group.prompt.idx, t.index),
                                             kind=DeadlineKind.ROLLOUT, budget_s=budget)
            self._deadline_tries[d.key] = t
            t.deadline_span = w.tel.start(services.CONTROLLER, SpanName.RL_DEADLINE, now, {
                **ids, Attr.DEADLINE_ID: f"{group.rollout_id}-d{t.index}",
                Attr.DEADLINE_KIND: DeadlineKind.ROLLOUT.value, Attr.DEADLINE_BUDGET_S: budget,
                Attr.DEADLINE_DESCRIPTION: "NeMo-Gym prompt group"}, t.span)
            w.tel.event(t.deadline_span, EventName.DEADLINE_START, now)
            self._arm(t)
        self._send_rows(t, list(range(len(group.prompt.rows))))

    def _send_rows(self, t: RLTry, rows: list[int]) -> None:
        if t.ended:
            return
        w = self.w
        t.rows_span = w.tel.start(services.CONTROLLER, SpanName.RL_GYM_ROWS, w.now, {
            **t.attrs(), Attr.ROW_ATTEMPT: t.rows.row_attempt, Attr.ROWS_PENDING: len(rows)},
            t.span)
        g = t.group
        for r in rows:
            run = w.gym.start_run(t, prompt_idx=g.prompt.idx, row_idx=r, rl_attempt=t.index,
                                  episode=EpisodeId(self._row_rollout_id(t, r),
                                                    g.episode_attempt[r]),
                                  row=g.prompt.rows[r], parent=t.rows_span)
            if run is not None:
                t.runs.append(run)
            if t.ended:
                return

    @staticmethod
    def _row_rollout_id(t: RLTry, row: int) -> str:
        # a row re-dispatched within the same try is a fresh Gym rollout: the completions view
        # joins on (rollout id, RL attempt), which must tell the two executions apart
        base = f"{t.group.rollout_id}-{row}"
        return base if t.rows.row_attempt == 1 else f"{base}.r{t.rows.row_attempt}"

    # -- deadlines --------------------------------------------------------------------------------
    def _arm(self, t: RLTry) -> None:
        if t.fire_timer is not None:
            t.fire_timer.cancel()
            t.fire_timer = None
        d = t.deadline
        due = d.due_at() if d is not None else None
        if due is not None:
            t.fire_timer = self.w.sched.at(due, self._fire, t, priority=Priority.DEADLINE)

    def _fire(self, t: RLTry) -> None:
        t.fire_timer = None
        d = t.deadline
        assert d is not None
        w = self.w
        state = w.gym.state_when([r for r in t.runs])
        w.deadlines.fire(d.key)
        w.tel.event(t.deadline_span, EventName.DEADLINE_FIRE, w.now, {
            Attr.DEADLINE_REMAINING_S: 0.0, Attr.DEADLINE_STATE_WHEN_FIRED: state})
        self._end_deadline(t, {Attr.DEADLINE_STATE_WHEN_FIRED: state})
        self._fail(t, rollout_timeout(d.budget_s))

    def deadline_fired(self, key: Any) -> None:
        """A deadline that fires itself (real ``_Deadline`` code on the runtime) expired."""
        t = self._deadline_tries.get(key)
        if t is not None and not t.ended:
            self._fire(t)

    def _end_deadline(self, t: RLTry, extra: dict[str, Any] | None = None) -> None:
        d = t.deadline
        if d is None or t.deadline_span is None:
            return
        if d.outcome is None:
            self.w.deadlines.complete(d.key)
        self._deadline_tries.pop(d.key, None)
        if t.fire_timer is not None:
            t.fire_timer.cancel()
        self.w.tel.end(t.deadline_span, self.w.now, {
            Attr.DEADLINE_OUTCOME: d.outcome.value if d.outcome else "completed",
            Attr.DEADLINE_SUSPENDED_S: round(d.suspended_s, 9),
            Attr.DEADLINE_ACTIVE_S: round(d.budget_s - d.remaining_s(self.w.now), 9),
            **(extra or {})})
        t.deadline_span = None

    def holders_changed(self, change: HolderChange, suspended: bool) -> None:
        name = EventName.DEADLINE_SUSPEND if suspended else EventName.DEADLINE_RESUME
        for d in change.changed:
            t = self._deadline_tries.get(d.key)
            if t is None or t.deadline_span is None:
                continue
            self.w.tel.event(t.deadline_span, name, self.w.now, {
                Attr.DEADLINE_HOLDER: change.holder.value,
                Attr.DEADLINE_HOLDERS_COUNT: change.holders_count})
            self._arm(t)

    # -- rows coming back ---------------------------------------------------------------------
    def row_done(self, t: RLTry, run: Any, receipt: CompletionReceipt | None,
                 failure: Failure | None) -> None:
        if t.ended or run.abandoned:
            return
        if failure is not None:
            self._fail(t, failure)
            return
        t.rows.outstanding -= 1
        if receipt is not None:
            self._receive(t, run.row_idx, receipt)
            if t.ended:
                return
        if t.rows.outstanding == 0 and len(t.rows.received) < t.rows.n:
            self._stream_ended_short(t)

    def _receive(self, t: RLTry, row_idx: int, receipt: CompletionReceipt) -> None:
        w = self.w
        w.tel.event(t.rows_span, EventName.ROW_RECEIVED, w.now, {
            Attr.ROW_IDX: row_idx, Attr.ROLLOUT_ID: receipt.rollout_id})
        self._pending_acks.append((receipt, t.group.prompt.idx, t.index))
        if w.snapshots.preparing:
            self.flush_acks()  # a receipt during prepare would block it until the next flush
        if t.rows.receive(row_idx):
            self._commit(t)

    def _stream_ended_short(self, t: RLTry) -> None:
        w = self.w
        lost = [r for r in t.runs if r.row_idx in t.rows.missing() and not r.abandoned]
        if Variant.RETIRE_THEN_ADOPT in w.variants and lost:
            for run in lost:
                run.abandoned = True
            self._to_retire.extend(lost)
            self.retire_pending()
            if t.ended:
                return
        missing = t.rows.missing()
        w.tel.end(t.rows_span, w.now, {Attr.ROWS_RECEIVED: len(t.rows.received),
                                       Attr.ROWS_MISSING: len(missing)})
        if not t.rows.can_redispatch():
            self._fail(t, missing_rows(missing, t.rows.n, t.rows.row_attempt))
            return
        rows = t.rows.redispatch()
        w.tel.event(t.span, EventName.ROW_REDISPATCH, w.now, {
            Attr.ROW_ATTEMPT: t.rows.row_attempt, Attr.ROWS_MISSING: len(rows)})
        t.runs = [r for r in t.runs if r.row_idx not in rows]
        self._when_fences_open(partial(self._send_rows, t, rows))

    def _commit(self, t: RLTry) -> None:
        w = self.w
        t.ended = True
        self.active.discard(t)
        # every run of a committed try has finished and nothing reads them again; each points
        # back at the try (its owner), so holding them here would leave the whole rollout (its
        # spans and their events) to the cyclic collector instead of freeing it now
        t.runs = []
        w.tel.end(t.rows_span, w.now, {Attr.ROWS_RECEIVED: t.rows.n, Attr.ROWS_MISSING: 0})
        self._end_deadline(t)
        w.tel.end(t.span, w.now, {Attr.ROLLOUT_OUTCOME: AttemptOutcome.COMMITTED.value})
        self._end_prompt(t.group, RolloutOutcome.COMMITTED)
        self.committed += 1
        self.run_budget.committed()
        self.flush_acks()
        self._train_if_due()

    def _end_prompt(self, group: PromptGroup, outcome: RolloutOutcome) -> None:
        self.w.tel.end(group.span, self.w.now, {
            Attr.ROLLOUT_OUTCOME: outcome.value,
            Attr.ROLLOUT_INFRA_ATTEMPTS: group.budget.infra,
            Attr.ROLLOUT_DATA_ATTEMPTS: group.budget.data})
        group.current = None

    def _fail(self, t: RLTry, failure: Failure) -> None:
        w, now = self.w, self.w.now
        t.ended = True
        self.active.discard(t)
        if t.deadline is not None and t.deadline.outcome is None:
            w.deadlines.cancel(t.deadline.key)
        self._end_deadline(t)
        if t.rows_span is not None and t.rows_span.is_recording():
            w.tel.end(t.rows_span, now, {Attr.ROWS_RECEIVED: len(t.rows.received),
                                         Attr.ROWS_MISSING: t.rows.n - len(t.rows.received)})
        # RL stops reading; it does not cancel the Gym runs
        abandoned = [r for r in t.runs if not r.abandoned]
        for run in abandoned:
            run.abandoned = True
        if Variant.RETIRE_THEN_ADOPT in w.variants:
            self._to_retire.extend(r for r in abandoned if r.key in w.gym.runs)
            self.retire_pending()
        decision = self.run_budget.decide(t.group.budget, failure)
        attrs = {Attr.ROLLOUT_OUTCOME: AttemptOutcome.FAILED.value,
                 Attr.FAILURE_CLASS: failure.failure_class.value,
                 Attr.FAILURE_REASON: failure.reason.value, Attr.FAILURE_DETAIL: failure.detail}
        if failure.http_status is not None:
            attrs[Attr.FAILURE_HTTP_STATUS] = failure.http_status
        if decision.verdict is Verdict.RETRY:
            attrs[Attr.BACKOFF_S] = decision.backoff_s
        t.span.set_status(Status(StatusCode.ERROR, failure.detail))
        w.tel.end(t.span, now, attrs)
        group = t.group
        if decision.verdict is Verdict.RETRY:
            w.sched.after(decision.backoff_s, self.request_dispatch, group,
                          priority=Priority.WORK)
            return
        if decision.verdict is Verdict.RAISE:
            group.span.set_status(Status(StatusCode.ERROR, failure.detail))
            self._end_prompt(group, RolloutOutcome.RAISED)
            self.raised = ("RolloutRedispatchExhausted" if failure.failure_class.value == "infra"
                           else failure.reason.value)
            w.sched.stop()
            return
        name = EventName.PROMPT_DROPPED if decision.verdict is Verdict.DROP else \
            EventName.PROMPT_SKIPPED
        w.tel.event(group.span, name, now, {Attr.FAILURE_REASON: failure.reason.value})
        self._end_prompt(group, RolloutOutcome.SKIPPED)

    # -- ACKs and retire-then-adopt ---------------------------------------------------------------
    def flush_acks(self, parent: Any = None) -> int:
        if not self._pending_acks:
            return 0
        pending, self._pending_acks = self._pending_acks, []
        w = self.w
        released = w.agent.acknowledge([r for r, _, _ in pending])
        # one span per ACK_RECEIPTS_PER_SPAN receipts: the SDK keeps at most 128 events on a
        # span and silently drops the rest, which would read as unacknowledged completions
        for at in range(0, len(pending), ACK_RECEIPTS_PER_SPAN):
            chunk = pending[at:at + ACK_RECEIPTS_PER_SPAN]
            w.tel.instant(services.CONTROLLER, SpanName.RL_GYM_ACK, w.now, {
                Attr.ACK_RECEIPTS: len(chunk), Attr.ACK_OUTCOME: "ok"}, parent, events=[
                (EventName.AGENT_ACKNOWLEDGED, {Attr.ROLLOUT_ID: r.rollout_id,
                                                Attr.RL_ATTEMPT: rl_attempt,
                                                Attr.PROMPT_IDX: prompt_idx,
                                                Attr.RESULT_ID: r.result_id})
                for r, prompt_idx, rl_attempt in chunk])
        w.on_gym_change()
        return released

    def retire_pending(self) -> None:
        """Retire abandoned runs; adopt (ACK, and use) the ones Gym says already completed."""
        if not self._to_retire:
            return
        w = self.w
        runs = {r.key.episode: r for r in self._to_retire}
        fan = w.snapshots.coordinate_retire(tuple(sorted(runs)))
        if fan is None:  # a checkpoint holds the participants: retry when it lets go
            return
        self._to_retire = []
        by_receipt = {(r.key.rollout_id, r.key.attempt, r.key.generation): r
                      for r in runs.values()}
        for receipt in fan:
            run = by_receipt.get((receipt.rollout_id, receipt.attempt_index,
                                  receipt.execution_generation))
            if run is None:
                continue
            t = run.owner
            self._pending_acks.append((receipt, run.prompt_idx, run.rl_attempt))
            if not t.ended and run.row_idx not in t.rows.received:
                t.adopted += 1
                self._receive(t, run.row_idx, receipt)
        for ep, run in runs.items():  # later dispatches of these rows run as the next attempt
            g = run.owner.group
            g.episode_attempt[run.row_idx] = max(g.episode_attempt[run.row_idx], ep.attempt + 1)
        self.flush_acks()

    # -- training and weight syncs ------------------------------------------------------------------
    def _train_if_due(self) -> None:
        tr = self.cfg.training
        due = self.committed // tr.prompts_per_step
        while self._steps_started < min(due, tr.max_num_steps):
            self._steps_started += 1
            start = max(self.w.now, self._trainer_busy_until)
            end = self._trainer_busy_until = start + tr.train_step_s
            self.w.sched.at(start, self._train_step, self._steps_started, end)

    def _train_step(self, step: int, end: float) -> None:
        span = self.w.tel.start(services.CONTROLLER, SpanName.RL_TRAIN_STEP, self.w.now,
                                {Attr.TRAIN_STEP: step})
        self.w.sched.at(end, self._train_step_done, span)

    def _train_step_done(self, span: Any) -> None:
        self.train_steps += 1
        self.w.tel.end(span, self.w.now)

    def weight_sync(self, duration_s: float, colocated: bool, index: int = 0) -> None:
        w = self.w
        if self.raised is not None:
            return
        self._sync_fences += 1
        version = self.train_steps
        fence = w.tel.start(services.CONTROLLER, SpanName.RL_ADMISSION_FENCE, w.now,
                            {Attr.FENCE_OWNER: FenceOwner.WEIGHT_SYNC.value})
        sync = w.tel.start(services.CONTROLLER, SpanName.RL_WEIGHT_SYNC, w.now,
                           {Attr.TRAINER_VERSION: version}, fence)
        if colocated:
            self.holders_changed(w.deadlines.suspend(DeadlineHolder.COLOCATED_TRAINING), True)
        if w.fleet.dead_ranks():
            # the broadcast includes a dead rank and blocks in NCCL: the sync never ends and
            # _rollout_permitted stays cleared (seed 003, P3); both spans stay open
            return
        w.sched.after(duration_s, self._weight_sync_done, fence, sync, colocated, version,
                      self._refit_misses.get(index, frozenset()), priority=Priority.CONTROL)

    def _weight_sync_done(self, fence: Any, sync: Any, colocated: bool, version: int = 0,
                          missed: frozenset[int] = frozenset()) -> None:
        w = self.w
        w.fleet.refit(version, missed)
        w.tel.end(sync, w.now)
        w.tel.end(fence, w.now)
        if colocated:
            self.holders_changed(w.deadlines.resume(DeadlineHolder.COLOCATED_TRAINING), False)
        self._sync_fences -= 1
        self._reopened()

    # -- the gym checkpoint fence -------------------------------------------------------------------
    def close_gym_fence(self, checkpoint_id: str, parent: Any) -> None:
        w = self.w
        self.gym_fence = w.tel.start(services.CONTROLLER, SpanName.RL_ADMISSION_FENCE, w.now, {
            Attr.FENCE_OWNER: FenceOwner.GYM_CHECKPOINT.value, Attr.CHECKPOINT_ID: checkpoint_id},
            parent)
        if Variant.PAUSE_DEADLINES_DURING_SNAPSHOT in w.variants:
            self.holders_changed(w.deadlines.suspend(DeadlineHolder.GYM_CHECKPOINT), True)

    def open_gym_fence(self) -> None:
        w = self.w
        w.tel.end(self.gym_fence, w.now)
        self.gym_fence = None
        if Variant.PAUSE_DEADLINES_DURING_SNAPSHOT in w.variants:
            self.holders_changed(w.deadlines.resume(DeadlineHolder.GYM_CHECKPOINT), False)
        self.retire_pending()
        self._reopened()

    # -- terminal errors and the Gym subprocess --------------------------------------------------
    def terminate(self, error: str) -> None:
        """A terminal controller error (GenerationFleetExhausted): the run ends here."""
        if self.raised is None:
            self.raised = error
        self.w.sched.stop()

    def gym_subprocess_died(self, environment: str) -> None:
        w = self.w
        w.env_dead = True
        self.dead_environment = environment
        w.tel.instant(services.CONTROLLER, SpanName.FAULT, w.now, {
            Attr.FAULT_KIND: "gym_subprocess_death",
            Attr.FAULT_DETAIL: f"the {environment} server subprocess exited"})

    # -- watchdog -----------------------------------------------------------------------------------
    def watchdog_tick(self) -> None:
        w = self.w
        if not w.fleet.probe_on_interval:
            w.fleet.probe_tick()  # before the fix, probes rode the watchdog tick
            if self.raised is not None:
                return
        stall = self.watchdog.tick(now=w.now, committed=self.committed,
                                   train_steps=self.train_steps, inflight=len(self.active))
        self._publish(self.watchdog.idle_s(w.now))
        if self.dead_environment is not None and self.cfg.watchdog.gym_subprocess_check:
            w.tel.instant(services.CONTROLLER, SpanName.RL_STALL_WATCHDOG_TICK, w.now, {}, None,
                          events=[(EventName.ENV_HEALTH_PROBLEM, {
                              Attr.ENV_NAME: self.dead_environment,
                              Attr.ENV_PROBLEM: f"environment '{self.dead_environment}' "
                                                f"reported unhealthy: server subprocess exited"})])
        if stall is not None:
            w.stalls += 1
            w.tel.instant(services.CONTROLLER, SpanName.RL_STALL_WATCHDOG_TICK, w.now, {}, None,
                          events=[(EventName.STALL, {
                              Attr.STALL_IDLE_S: round(stall.idle_s, 3),
                              Attr.STALL_INFLIGHT: stall.inflight,
                              Attr.STALL_COMMITTED: stall.committed,
                              Attr.STALL_TRAIN_STEPS: stall.train_steps,
                              Attr.STALL_MAX_STEPS: stall.max_steps,
                              Attr.STALL_TIMEOUT_S: stall.stall_timeout_s,
                              Attr.STALL_ACTION: stall.action.value})])
            if stall.action is StallAction.ABORT:
                self.raised = "RolloutStall"
                w.sched.stop()
                return
        w.sched.after(self.cfg.watchdog.interval_s, self.watchdog_tick,
                      priority=Priority.WATCHDOG)

    def _publish(self, idle_s: float) -> None:
        """The watchdog's gauges (DOMAIN.md §3.8, §4.5, §4.6)."""
        tel, now, step = self.w.tel, self.w.now, self.train_steps
        gauges = {"rollout/committed_total": self.committed, "rollout/inflight": len(self.active),
                  "rollout/idle_s": round(idle_s, 3), "rollout/train_steps": step,
                  **self.w.fleet.gauges()}
        for name, value in gauges.items():
            tel.gauge(services.CONTROLLER, name, now, value, step)
