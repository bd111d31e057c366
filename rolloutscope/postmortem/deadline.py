"""P1: a rollout deadline that fired while a snapshot had the rollout parked (RL #4266).

The budget arithmetic is the whole incident: a try starts with ``rollout_timeout_s`` of budget;
when the snapshot closes admission the try has ``budget - (snapshot start - deadline start)``
left (plus any time its deadline spent suspended); if the snapshot holds the try parked longer
than that, the deadline fires while it is parked and RL abandons a try Gym will still finish.
``ParkedDeadline`` carries those instants, read from the ``deadlines``, ``parked_intervals`` and
``checkpoint_windows`` views, and derives the rest. ``replay_with_fix`` replays the captured run
twice through the replayer, once as captured (the replay must reproduce the incident before its
verdict on the fix means anything) and once with the fix, and compares the fixed replay with the
capture.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rolloutscope.store import RunStore, run_reads
from rolloutscope.postmortem.run_tables import (
    PostmortemError,
    RunRef,
    incident_table,
    origin_ns,
    seconds,
)
from rolloutscope.replay import compare
from rolloutscope.replay.compare import RunComparison
from rolloutscope.replay.replay_capture import ReplayRunResult, capture_from_store, replay_run
from rolloutscope.replay.variants import Variant

KIND = "deadline_fired_while_parked"
FIX = Variant.PAUSE_DEADLINES_DURING_SNAPSHOT.value


@dataclass(frozen=True, kw_only=True)
class ParkedDeadline:
    """One P1 incident; every time is seconds from the run's start."""

    incident_id: str
    run_id: str
    rollout_id: str
    attempt: int
    checkpoint_id: str
    summary: str
    budget_s: float
    suspended_s: float  # time the deadline had spent suspended by a holder before it fired
    deadline_start_s: float
    snapshot_start_s: float  # admission closed for the snapshot
    snapshot_end_s: float | None  # admission reopened; None while the window is open
    parked_at_s: float
    fired_at_s: float
    released_at_s: float | None  # the park ended (resume); None while still parked

    @property
    def budget_left_at_snapshot_s(self) -> float:
        return self.budget_s - (self.snapshot_start_s - self.deadline_start_s) + self.suspended_s

    @property
    def parked_when_fired_s(self) -> float:
        return self.fired_at_s - self.parked_at_s

    @property
    def snapshot_s(self) -> float | None:
        if self.snapshot_end_s is None:
            return None
        return self.snapshot_end_s - self.snapshot_start_s

    @property
    def overrun_s(self) -> float | None:
        """How much longer the snapshot held admission than the try had budget left."""
        if self.snapshot_s is None:
            return None
        return self.snapshot_s - self.budget_left_at_snapshot_s


def incidents(store: RunStore, run_id: str) -> pd.DataFrame:
    """The run's P1 incidents: when, which try, which snapshot, the two numbers that matter."""
    base = incident_table(store, run_id, kinds=[KIND])
    detail = store.view(KIND, run_id=run_id)[["incident_id", "checkpoint_id", "parked_s",
                                              "budget_left_s"]]
    out = base.merge(detail, on="incident_id", how="left")
    return out[["start_s", "subject", "checkpoint_id", "budget_left_s", "parked_s", "summary",
                "incident_id"]]


def parked_deadline(store: RunStore, run_id: str,
                    incident_id: str | None = None) -> ParkedDeadline:
    """One P1 incident (the earliest, unless ``incident_id`` names one) with its instants."""
    origin = origin_ns(store, run_id)
    rows = store.query_df(
        f"""SELECT i.incident_id, i.summary, i.checkpoint_id, i.attempt, d.rollout_id,
                   d.budget_s, d.suspended_s, d.start_ns AS deadline_ns, d.fired_ns,
                   p.start_ns AS parked_ns, p.end_ns AS released_ns,
                   w.start_ns AS window_ns, w.end_ns AS window_end_ns
            FROM {KIND} i
            JOIN deadlines d ON d.run_id = i.run_id AND d.span_id = i.evidence[1]
            JOIN parked_intervals p ON p.run_id = i.run_id AND p.span_id = i.evidence[2]
            LEFT JOIN checkpoint_windows w
                ON w.run_id = i.run_id AND w.checkpoint_id = i.checkpoint_id
            WHERE i.run_id = ?
            ORDER BY i.start_ns, i.incident_id""", [run_id])
    if incident_id is not None:
        rows = rows[rows.incident_id == incident_id]
    if not len(rows):
        which = f"incident {incident_id}" if incident_id else f"{KIND} incident"
        raise PostmortemError(f"run {run_id} has no {which}")
    r = rows.iloc[0]
    # a run recorded without the RL admission fence has only the park to date the snapshot by
    window_ns = r.window_ns if pd.notna(r.window_ns) else r.parked_ns
    return ParkedDeadline(
        incident_id=str(r.incident_id), run_id=run_id, rollout_id=str(r.rollout_id),
        attempt=int(r.attempt), checkpoint_id=str(r.checkpoint_id), summary=str(r.summary),
        budget_s=float(r.budget_s), suspended_s=float(r.suspended_s),
        deadline_start_s=seconds(r.deadline_ns, origin),
        snapshot_start_s=seconds(window_ns, origin),
        snapshot_end_s=seconds(r.window_end_ns, origin),
        parked_at_s=seconds(r.parked_ns, origin), fired_at_s=seconds(r.fired_ns, origin),
        released_at_s=seconds(r.released_ns, origin))


def budget_table(incident: ParkedDeadline) -> pd.DataFrame:
    """The arithmetic as a small table: each quantity, its value in seconds, where it is from."""
    rows = [
        ("deadline started (try dispatched)", incident.deadline_start_s, "deadlines.start_ns"),
        ("budget (rollout_timeout_s)", incident.budget_s, "deadlines.budget_s"),
        ("snapshot started (admission closed)", incident.snapshot_start_s,
         "checkpoint_windows.start_ns"),
        ("budget left when the snapshot started", incident.budget_left_at_snapshot_s,
         "budget - (snapshot start - deadline start) + suspended"),
        ("try parked at", incident.parked_at_s, "parked_intervals.start_ns"),
        ("deadline fired at", incident.fired_at_s, "deadlines.fired_ns"),
        ("parked time when it fired", incident.parked_when_fired_s,
         "fired at - parked at"),
        ("snapshot ended (admission reopened)", incident.snapshot_end_s,
         "checkpoint_windows.end_ns"),
        ("snapshot held admission for", incident.snapshot_s, "end - start"),
        ("snapshot outlasted the budget left by", incident.overrun_s,
         "held for - budget left"),
    ]
    return pd.DataFrame(rows, columns=["quantity", "seconds", "from"])


def timeline_around(store: RunStore, incident: ParkedDeadline, *,
                    pad_s: float = 60.0) -> pd.DataFrame:
    """The incident's rollout, the snapshots and the incidents, from ``pad_s`` before its
    deadline started to ``pad_s`` after the snapshot that parked it ended."""
    run_id = incident.run_id
    lo = incident.deadline_start_s - pad_s
    hi = (incident.snapshot_end_s if incident.snapshot_end_s is not None
          else incident.fired_at_s) + pad_s
    origin = origin_ns(store, run_id)
    # only that stretch is read (the maintained rows where the store keeps them), not the run
    df = run_reads.timeline(store, run_id, side=run_id,
                       window=(origin + int(lo * 1e9) - 1, origin + int(hi * 1e9) + 1))
    rollout = incident.rollout_id.split("-", 1)[0]
    lanes = df.lane.isin([rollout, incident.rollout_id, "snapshots", "incidents"])
    overlaps = (df.start_s <= hi) & (df.end_s.isna() | (df.end_s >= lo))
    return df[lanes & overlaps].drop(columns="run").reset_index(drop=True)


def deadline_outcomes(store: RunStore, run_id: str) -> pd.DataFrame:
    """Every rollout deadline of the run: its budget, how long it was suspended, how it ended."""
    origin = origin_ns(store, run_id)
    d = store.view("deadlines", run_id=run_id)
    d = d[d.kind == "rollout"].sort_values(["start_ns", "deadline_id"])
    return pd.DataFrame({
        "rollout_id": d.rollout_id.to_numpy(), "try": d.attempt.astype("Int64").to_numpy(),
        "started_s": [seconds(v, origin) for v in d.start_ns],
        "budget_s": d.budget_s.to_numpy(), "suspended_s": d.suspended_s.to_numpy(),
        "ended_s": [seconds(v, origin) for v in d.end_ns],
        "outcome": d.outcome.to_numpy(), "state_when_fired": d.state_when_fired.to_numpy()})


@dataclass(frozen=True, kw_only=True)
class FixReplay:
    """A captured run replayed as captured and with a fix, and the fixed replay against it."""

    fix: str
    out: Path  # the store both replays were written to
    reproduction: ReplayRunResult
    fixed: ReplayRunResult
    comparison: RunComparison  # A: the captured run, B: the fixed replay
    deadlines: pd.DataFrame  # every rollout deadline, captured ("before") and fixed ("after")
    p1_captured: int
    p1_reproduced: int
    p1_fixed: int

    @property
    def reproduces(self) -> bool:
        """The replay without the fix shows what the capture showed."""
        return self.reproduction.ok

    @property
    def fixed_run(self) -> RunRef:
        return RunRef(path=self.out, run_id=self.fixed.run_id)

    def verdict(self) -> list[str]:
        return compare.headline(self.comparison)

    def report(self) -> str:
        """What each replay showed against the capture, as the replayer words it."""
        return "\n".join([*self.reproduction.lines(), "", *self.fixed.lines()])


def _p1_count(path: Path, run_id: str) -> int:
    with RunStore(path, read_only=True) as store:
        return int(store.query(f"SELECT count(*) FROM {KIND} WHERE run_id = ?", [run_id])[0][0])


def replay_with_fix(run: RunRef, *, out: str | Path, fix: str = FIX) -> FixReplay:
    """Replay ``run`` into the store at ``out`` as captured, then with ``fix`` added."""
    capture = capture_from_store(run.path, run.run_id)
    reproduction = replay_run(capture, out=out, variants=capture.variants,
                              fail_on_divergence=False)
    fixed = replay_run(capture, out=out, variants=(*capture.variants, fix),
                       fail_on_divergence=False)
    if reproduction.error or fixed.error:
        raise PostmortemError(f"replay of {capture.label} failed: "
                              f"{reproduction.error or fixed.error}")
    out_path = Path(fixed.out)
    with RunStore(run.path, read_only=True) as a, RunStore(out_path, read_only=True) as b:
        comparison = compare.compare_runs(a, run.run_id, b, fixed.run_id)
        deadlines = pd.concat(
            [deadline_outcomes(a, run.run_id).assign(run="before"),
             deadline_outcomes(b, fixed.run_id).assign(run="after")], ignore_index=True)
    deadlines = deadlines[["run", *deadlines.columns[:-1]]]
    return FixReplay(fix=fix, out=out_path, reproduction=reproduction, fixed=fixed,
                     comparison=comparison, deadlines=deadlines,
                     p1_captured=_p1_count(run.path, run.run_id),
                     p1_reproduced=_p1_count(out_path, reproduction.run_id),
                     p1_fixed=_p1_count(out_path, fixed.run_id))
