"""Controller side of a replay: the rollout pump, fences, ACKs, training, weight syncs, watchdog.

One ``PromptGroup`` per prompt runs RL tries (``generate_and_push`` iterations). Each try
reserves a group id, arms one rollout deadline over its whole row stream (row re-dispatches
included), and dispatches its rows to Gym once both admission fences (weight sync, Gym
checkpoint) are open. A deadline that fires stops RL reading the try; Gym keeps running it.

What the controller asks of the rest is handed in (``ports``): Gym's runs and ACKs, the fleet's
probes and refits, the retire coordination, the deadline registry. What it emits goes through
its ``ControllerRecorder``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from rolloutscope.vocabulary import DeadlineHolder, RolloutOutcome, StallAction
from rolloutscope.replay.event_engine import Priority
from rolloutscope.replay.participants.agent import CompletionReceipt
from rolloutscope.replay.participants.protocol import EpisodeId
from rolloutscope.replay.participants.rollouts import (
    Failure,
    PromptBudget,
    RowDispatch,
    RunBudget,
    StallWatchdog,
    Verdict,
    missing_rows,
)
from rolloutscope.replay.scenario import Config, Faults, Prompt
from rolloutscope.replay.sim.controller_deadlines import TryDeadlines
from rolloutscope.replay.sim.controller_recorder import ControllerRecorder, PendingAck
from rolloutscope.replay.sim.ports import (
    DeadlineBook,
    FleetForController,
    GymForController,
    RetireCoordination,
    Timeline,
)
from rolloutscope.replay.sim.rollout_state import PromptGroup, RLTry
from rolloutscope.replay.sim.gym_run import RefusedRun, Run
from rolloutscope.replay.sim.signals import PrepareWatch, RunEnd


class ControllerSide:
    def __init__(self, *, config: Config, faults: Faults, timeline: Timeline, run_end: RunEnd,
                 deadlines: DeadlineBook, gym: GymForController, fleet: FleetForController,
                 retire: RetireCoordination, prepare: PrepareWatch, recorder: ControllerRecorder,
                 retire_then_adopt: bool, pause_deadlines_during_snapshot: bool) -> None:
        self.cfg = config
        self._timeline = timeline
        self._run_end = run_end
        self._gym = gym
        self._fleet = fleet
        self._retire = retire
        self._prepare = prepare
        self._rec = recorder
        self._retire_then_adopt = retire_then_adopt
        self._pause_deadlines = pause_deadlines_during_snapshot
        self.deadlines = TryDeadlines(registry=deadlines, timeline=timeline, recorder=recorder,
                                      state_when=gym.state_when, on_fired=self._fail)
        ro = config.rollout
        self.run_budget = RunBudget(max_consecutive_dropped=ro.max_consecutive_dropped_prompts,
                                    max_skipped=ro.max_skipped_prompts)
        self.watchdog = StallWatchdog(stall_timeout_s=config.watchdog.stall_timeout_s,
                                      max_steps=config.training.max_num_steps,
                                      action=config.watchdog.stall_action)
        self.committed = 0
        self.train_steps = 0
        self.stalls = 0
        self._steps_started = 0
        self._trainer_busy_until = 0.0
        self.active: set[RLTry] = set()
        self._waiting: list[Callable[[], None]] = []  # dispatches held by a closed fence
        self._gym_fence_closed = False  # a snapshot holds Gym's admission
        self._sync_fences = 0
        self._pending_acks: list[PendingAck] = []
        self._to_retire: list[Run] = []
        self.dead_environment: str | None = None
        misses: dict[int, set[int]] = {}
        for miss in faults.refit_misses:
            misses.setdefault(miss.sync_index, set()).add(miss.shard)
        self._refit_misses = {k: frozenset(v) for k, v in misses.items()}

    @property
    def raised(self) -> str | None:
        return self._run_end.raised

    # -- arrivals and dispatch ------------------------------------------------------------------
    def arrive(self, prompt: Prompt) -> None:
        ro = self.cfg.rollout
        group = PromptGroup(prompt, PromptBudget(
            max_infra=ro.max_infra_attempts_per_prompt, max_data=ro.max_data_attempts_per_prompt,
            backoff_base_s=ro.backoff_base_s, max_backoff_s=ro.max_backoff_s))
        self._rec.prompt_arrived(group)
        self.request_dispatch(group)

    def fences_open(self) -> bool:
        return not self._gym_fence_closed and self._sync_fences == 0

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
        t = RLTry(group, group.tries,
                  RowDispatch(len(group.prompt.rows), self.cfg.rollout.max_row_attempts),
                  row_done=self.row_done)
        group.tries += 1
        group.current = t
        self.active.add(t)
        self._rec.attempt_started(t, target_step=self.train_steps)
        budget = self.cfg.rollout.rollout_timeout_s
        if budget is not None:
            self.deadlines.start(t, budget)
        self._send_rows(t, list(range(len(group.prompt.rows))))

    def _send_rows(self, t: RLTry, rows: list[int]) -> None:
        if t.ended:
            return
        self._rec.rows_sent(t, len(rows))
        g = t.group
        for r in rows:
            run = self._gym.start_run(t, prompt_idx=g.prompt.idx, row_idx=r,
                                      rl_attempt=t.index,
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

    # -- rows coming back ---------------------------------------------------------------------
    def row_done(self, t: RLTry, run: Run | RefusedRun, receipt: CompletionReceipt | None,
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
        self._rec.row_received(t, row_idx, receipt)
        self._pending_acks.append((receipt, t.group.prompt.idx, t.index))
        if self._prepare.preparing:
            self.flush_acks()  # a receipt during prepare would block it until the next flush
        if t.rows.receive(row_idx):
            self._commit(t)

    def _stream_ended_short(self, t: RLTry) -> None:
        lost = [r for r in t.runs if r.row_idx in t.rows.missing() and not r.abandoned]
        if self._retire_then_adopt and lost:
            for run in lost:
                run.abandoned = True
            self._to_retire.extend(lost)
            self.retire_pending()
            if t.ended:
                return
        missing = t.rows.missing()
        self._rec.rows_ended(t, received=len(t.rows.received), missing=len(missing))
        if not t.rows.can_redispatch():
            self._fail(t, missing_rows(missing, t.rows.n, t.rows.row_attempt))
            return
        rows = t.rows.redispatch()
        self._rec.rows_redispatched(t, len(rows))
        t.runs = [r for r in t.runs if r.row_idx not in rows]
        self._when_fences_open(partial(self._send_rows, t, rows))

    def _commit(self, t: RLTry) -> None:
        t.ended = True
        self.active.discard(t)
        # every run of a committed try has finished and nothing reads them again; each points
        # back at the try (its owner), so holding them here would leave the whole rollout (its
        # spans and their events) to the cyclic collector instead of freeing it now
        t.runs = []
        self._rec.rows_ended(t, received=t.rows.n, missing=0)
        self.deadlines.end(t)
        self._rec.attempt_committed(t)
        self._end_prompt(t.group, RolloutOutcome.COMMITTED)
        self.committed += 1
        self.run_budget.committed()
        self.flush_acks()
        self._train_if_due()

    def _end_prompt(self, group: PromptGroup, outcome: RolloutOutcome) -> None:
        self._rec.prompt_ended(group, outcome)
        group.current = None

    def _fail(self, t: RLTry, failure: Failure) -> None:
        t.ended = True
        self.active.discard(t)
        self.deadlines.cancel(t)
        self.deadlines.end(t)
        self._rec.rows_abandoned(t)
        # RL stops reading; it does not cancel the Gym runs
        abandoned = [r for r in t.runs if not r.abandoned]
        for run in abandoned:
            run.abandoned = True
        if self._retire_then_adopt:
            self._to_retire.extend(r for r in abandoned if self._gym.is_live(r))
            self.retire_pending()
        decision = self.run_budget.decide(t.group.budget, failure)
        self._rec.attempt_failed(t, failure, decision)
        group = t.group
        if decision.verdict is Verdict.RETRY:
            self._timeline.after(decision.backoff_s, self.request_dispatch, group,
                                 priority=Priority.WORK)
            return
        if decision.verdict is Verdict.RAISE:
            self._rec.prompt_raised(group, failure)
            self._end_prompt(group, RolloutOutcome.RAISED)
            self._run_end.raise_error("RolloutRedispatchExhausted"
                                      if failure.failure_class.value == "infra"
                                      else failure.reason.value)
            return
        self._rec.prompt_given_up(group, failure, dropped=decision.verdict is Verdict.DROP)
        self._end_prompt(group, RolloutOutcome.SKIPPED)

    # -- ACKs and retire-then-adopt ---------------------------------------------------------------
    def flush_acks(self, parent: object = None) -> int:
        if not self._pending_acks:
            return 0
        pending, self._pending_acks = self._pending_acks, []
        released = self._gym.acknowledge([r for r, _, _ in pending])
        self._rec.acks_sent(pending, parent)
        self._prepare.gym_changed()
        return released

    def retire_pending(self) -> None:
        """Retire abandoned runs; adopt (ACK, and use) the ones Gym says already completed."""
        if not self._to_retire:
            return
        runs = {r.key.episode: r for r in self._to_retire}
        fan = self._retire.coordinate_retire(tuple(sorted(runs)))
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

    # -- training and weight syncs ----------------------------------------------------------------
    def _train_if_due(self) -> None:
        tr = self.cfg.training
        due = self.committed // tr.prompts_per_step
        while self._steps_started < min(due, tr.max_num_steps):
            self._steps_started += 1
            start = max(self._timeline.now, self._trainer_busy_until)
            end = self._trainer_busy_until = start + tr.train_step_s
            self._timeline.at(start, self._train_step, self._steps_started, end)

    def _train_step(self, step: int, end: float) -> None:
        self._timeline.at(end, self._train_step_done, self._rec.train_step_started(step))

    def _train_step_done(self, handle: object) -> None:
        self.train_steps += 1
        self._rec.train_step_ended(handle)

    def weight_sync(self, duration_s: float, colocated: bool, index: int = 0) -> None:
        if self.raised is not None:
            return
        self._sync_fences += 1
        version = self.train_steps
        spans = self._rec.weight_sync_started(version)
        if colocated:
            self.deadlines.suspend(DeadlineHolder.COLOCATED_TRAINING)
        if self._fleet.dead_ranks():
            # the broadcast includes a dead rank and blocks in NCCL: the sync never ends and
            # _rollout_permitted stays cleared; both spans stay open
            return
        self._timeline.after(duration_s, self._weight_sync_done, spans, colocated, version,
                             self._refit_misses.get(index, frozenset()),
                             priority=Priority.CONTROL)

    def _weight_sync_done(self, spans: tuple[object, object], colocated: bool, version: int,
                          missed: frozenset[int]) -> None:
        self._fleet.refit(version, missed)
        self._rec.weight_sync_ended(spans)
        if colocated:
            self.deadlines.resume(DeadlineHolder.COLOCATED_TRAINING)
        self._sync_fences -= 1
        self._reopened()

    # -- the gym checkpoint fence -----------------------------------------------------------------
    def close_gym_fence(self, checkpoint_id: str, parent: object) -> None:
        self._gym_fence_closed = True
        self._rec.gym_fence_closed(checkpoint_id, parent)
        if self._pause_deadlines:
            self.deadlines.suspend(DeadlineHolder.GYM_CHECKPOINT)

    def open_gym_fence(self) -> None:
        self._rec.gym_fence_opened()
        self._gym_fence_closed = False
        if self._pause_deadlines:
            self.deadlines.resume(DeadlineHolder.GYM_CHECKPOINT)
        self.retire_pending()
        self._reopened()

    # -- terminal errors and the Gym subprocess --------------------------------------------------
    def gym_subprocess_died(self, environment: str) -> None:
        self.dead_environment = environment
        self._rec.gym_subprocess_died(environment)

    # -- watchdog ---------------------------------------------------------------------------------
    def watchdog_tick(self) -> None:
        if not self._fleet.probe_on_interval:
            self._fleet.probe_tick()  # before the fix, probes rode the watchdog tick
            if self.raised is not None:
                return
        now = self._timeline.now
        stall = self.watchdog.tick(now=now, committed=self.committed,
                                   train_steps=self.train_steps, inflight=len(self.active))
        self._publish(self.watchdog.idle_s(now))
        if self.dead_environment is not None and self.cfg.watchdog.gym_subprocess_check:
            self._rec.environment_unhealthy(self.dead_environment)
        if stall is not None:
            self.stalls += 1
            self._rec.stalled(stall)
            if stall.action is StallAction.ABORT:
                self._run_end.raise_error("RolloutStall")
                return
        self._timeline.after(self.cfg.watchdog.interval_s, self.watchdog_tick,
                             priority=Priority.WATCHDOG)

    def _publish(self, idle_s: float) -> None:
        gauges = {"rollout/committed_total": self.committed, "rollout/inflight": len(self.active),
                  "rollout/idle_s": round(idle_s, 3), "rollout/train_steps": self.train_steps,
                  **self._fleet.gauges()}
        self._rec.gauges(gauges, self.train_steps)
