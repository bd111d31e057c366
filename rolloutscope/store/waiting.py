"""What a run is waiting on at one moment: the prompt groups the current train step still needs,
where each group's slowest rollout is, and the resource it waits on.

Rule: everything is read for one moment ``at_ns`` (default: the last instant the store holds
for the run) from the views and spans that were live then. A span live at ``at_ns`` began at or
before it and had not ended: either it ended after ``at_ns`` (the spans committed after the
moment, which DuckDB's zone maps on ``end_ns`` find without reading the rest of the run) or it
is still open (the store's open markers). The rows of the groups themselves are read from the
start of the oldest waiting group on. So the cost follows the groups shown and the spans around
the moment, never the run's size; nothing here loads a run.

A group (an RL ``rl.rollout.prompt`` still open; in a Gym-only run, a ``gym.rollout`` still
open) is in one of these states, named by ``WaitState``:

- no RL try running: ``admission`` (an admission fence is closed: a weight sync or a snapshot
  holds it), ``redispatch`` (its last try failed and RL has not started the next), or
  ``controller`` (arrived, not dispatched, nothing closed: the controller itself);
- a try running: the state of its slowest row: ``parked`` (by a snapshot), ``generating`` (a
  router request to a shard is open), ``model_call`` (a Gym model call is open, no router
  request seen), ``retrying`` (its last model call failed on a shard moments ago), ``verifying``
  (``gym.verify`` open), ``agent`` (running in the agent: a tool call or between turns), or
  ``rows_back`` (every row is back and the try has not committed).

A group's slowest row is the one in the most serious state (parked first, then a call on a
shard in trouble, then the rest), the longest in it among equals. A shard is in trouble when
fleet health does not call it healthy or it has finished no generation for ``QUIET_S``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from rolloutscope.errors import InputError
from rolloutscope.store.errors import UnknownRunError
from rolloutscope.store.store import RunStore
from rolloutscope.vocabulary import Attr, SpanName

QUIET_S = 120.0
"""A shard that finished no generation for this long, while a row waits on it, is in trouble."""
SHARD_LOOKBACK_S = 3600.0
"""How far back a shard's last finished generation is looked for; beyond it, "over an hour"."""
RETRY_WINDOW_S = 60.0
"""A row whose model call failed this recently, and that has none open, is retrying it."""
MAX_GROUPS = 50
"""Groups listed in full (oldest first); the answer counts them all."""

_MODEL_SPANS = (SpanName.GYM_MODEL_RESPONSES, SpanName.GYM_MODEL_CHAT, SpanName.GYM_MODEL_MESSAGES)


class WaitState:
    """Where a waiting group's slowest rollout is (module doc), with its severity: the slowest
    row of a group is the one of highest severity."""

    ADMISSION = "admission"
    REDISPATCH = "redispatch"
    CONTROLLER = "controller"
    PARKED = "parked"
    GENERATING = "generating"
    MODEL_CALL = "model_call"
    RETRYING = "retrying"
    VERIFYING = "verifying"
    AGENT = "agent"
    ROWS_BACK = "rows_back"

    SEVERITY = {PARKED: 6, RETRYING: 4, GENERATING: 3, MODEL_CALL: 3, VERIFYING: 2, AGENT: 1,
                ROWS_BACK: 0}
    TROUBLE = 2  # added to a row whose shard is in trouble


@dataclass(frozen=True)
class Evidence:
    """The span that shows a state: its name, id and start (seconds from the run's origin)."""

    name: str
    span_id: str
    start_s: float | None


@dataclass(frozen=True)
class Resource:
    """What a group waits on: kind (shard, snapshot, weight_sync, controller, agent,
    verifier, model_server), its name, and its health at the moment in words."""

    kind: str
    name: str
    health: str
    in_trouble: bool = False


@dataclass(frozen=True)
class WaitingGroup:
    """One prompt group the step still needs, by its slowest rollout."""

    group: str  # the RL rollout id (prompt group), or a Gym rollout id
    prompt_idx: int | None
    rollout: str | None  # the slowest row's capture key; None while no try runs
    state: str  # a WaitState
    doing: str  # the state in words
    since_s: float | None
    for_s: float  # how long it has been in that state at the moment
    resource: Resource
    evidence: Evidence | None


@dataclass(frozen=True)
class WaitingOn:
    """A run's answer at one moment: the answer line, then each waiting group."""

    run_id: str
    at_ns: int
    at_s: float
    step: int
    answer: str
    waiting: int  # groups waiting (``groups`` lists at most MAX_GROUPS of them)
    groups: tuple[WaitingGroup, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def waiting_on(store: RunStore, run_id: str | None = None, *, at_ns: int | None = None,
               at_s: float | None = None, step: int | None = None) -> WaitingOn:
    """What ``run_id`` (None: the store's only run) waits on at ``at_ns`` (epoch ns), ``at_s``
    (seconds from the run's origin), or while train ``step`` was collecting (the end of the
    longest stretch in that step with no group committed; the last moment held for a step that
    never trained), else at the last moment the store holds."""
    run_id = _the_run(store, run_id)
    origin, last = _origin_and_last(store, run_id)
    if step is not None:
        at_ns = _moment_of_step(store, run_id, step, origin, last)
    elif at_s is not None:
        at_ns = origin + int(at_s * 1e9)
    elif at_ns is None:
        at_ns = last
    return _Reader(store, run_id, int(at_ns), origin).answer()


class MomentError(InputError):
    """The moment asked for does not exist in the store: no run, several runs and none named,
    or a train step the run never reached."""


def _the_run(store: RunStore, run_id: str | None) -> str:
    # the runs table first: a writer records every run it stores there, and listing the runs
    # from the spans (store.run_ids, for files written before) reads a column of every span
    registered = [r[0] for r in store.query("SELECT run_id FROM runs ORDER BY run_id")]
    if run_id in registered or (run_id is None and len(registered) == 1):
        return run_id or registered[0]
    known = store.run_ids()
    if run_id is None:
        if len(known) != 1:
            raise MomentError(f"{store.path} holds {len(known)} runs; name one with --run-id"
                              + (f": {', '.join(known)}" if known else ""))
        return known[0]
    if run_id not in known:
        raise UnknownRunError(str(store.path), run_id, known)
    return run_id


def _origin_and_last(store: RunStore, run_id: str) -> tuple[int, int]:
    row = store.query(f"SELECT origin_ns, end_ns FROM {store.relation('run_thresholds')} "
                      "WHERE run_id = ?", [run_id])
    origin, last = row[0] if row else (None, None)
    if last is None:
        last = store.query("SELECT max(coalesce(end_ns, start_ns)) FROM all_spans "
                           "WHERE run_id = ?", [run_id])[0][0] or 0
    return int(origin if origin is not None else last), int(last)


def _moment_of_step(store: RunStore, run_id: str, step: int, origin: int, last: int) -> int:
    ends = [r[0] for r in store.query(
        "SELECT end_ns FROM all_spans WHERE run_id = ? AND name = ? AND end_ns IS NOT NULL "
        "ORDER BY end_ns", [run_id, SpanName.RL_TRAIN_STEP])]
    if step < 1 or step > len(ends) + 1:
        raise MomentError(f"run {run_id} has no train step {step}: it completed {len(ends)} "
                          f"(step {len(ends) + 1} is the one collecting at its end)")
    lo = ends[step - 2] if step >= 2 else origin
    if step == len(ends) + 1:
        return last
    hi = store.query("SELECT max(start_ns) FROM all_spans WHERE run_id = ? AND name = ? "
                     "AND end_ns = ?", [run_id, SpanName.RL_TRAIN_STEP, ends[step - 1]])[0][0]
    commits = [r[0] for r in store.query(
        f"SELECT end_ns FROM {store.relation('rollout_attempts')} WHERE run_id = ? "
        "AND outcome IN ('committed', 'finished') AND end_ns > ? AND end_ns <= ? "
        "ORDER BY end_ns", [run_id, lo, hi])]
    marks = [lo, *commits]
    if len(marks) < 2:
        return max(lo, hi - 1)
    gap_end = max(zip(marks, marks[1:]), key=lambda p: p[1] - p[0])[1]
    return gap_end - 1  # just before the commit that ended the longest wait


def _live(names: tuple[str, ...], columns: str, extra: str = "") -> str:
    """Spans of ``names`` live at $at: ended after it, or still open (module doc). Two
    branches, so that the first one's filter on end_ns meets the zone maps alone."""
    inlist = ", ".join(f"'{n}'" for n in names)  # names from SpanName, not from input
    where = f"run_id = $run AND name IN ({inlist}) AND start_ns <= $at {extra}"
    return (f"SELECT {columns} FROM all_spans WHERE {where} AND end_ns > $at "
            f"UNION ALL SELECT {columns} FROM all_spans WHERE {where} AND end_ns IS NULL")


class _Reader:
    """The reads of one answer, and the classification of each group."""

    def __init__(self, store: RunStore, run_id: str, at_ns: int, origin: int) -> None:
        self.store, self.run_id, self.at, self.origin = store, run_id, at_ns, origin
        self.p = {"run": run_id, "at": at_ns}

    def q(self, sql: str, **more: Any) -> list[dict[str, Any]]:
        # DuckDB refuses a named parameter the statement does not use
        params = {k: v for k, v in {**self.p, **more}.items() if f"${k}" in sql}
        return self.store.query_records(sql, params)

    def s(self, ns: int | None) -> float | None:
        return None if ns is None else round((int(ns) - self.origin) / 1e9, 3)

    def ev(self, row: dict | None, name: str | None = None) -> Evidence | None:
        if row is None:
            return None
        return Evidence(name or row["name"], row["span_id"], self.s(row["start_ns"]))

    # -- the reads -----------------------------------------------------------------------------
    def step(self) -> int:
        done = self.q("SELECT count(*) AS n FROM all_spans WHERE run_id = $run AND name = "
                      f"'{SpanName.RL_TRAIN_STEP}' AND end_ns <= $at")[0]["n"]
        if not done:
            done = self.q("SELECT coalesce(max(value), 0) AS n FROM metrics WHERE run_id = $run "
                          "AND name = 'rollout/train_steps' AND ts_ns <= $at")[0]["n"]
        return int(done) + 1

    def groups(self) -> list[dict]:
        cols = "name, trace_id, span_id, rollout_id, prompt_idx, start_ns"
        rows = self.q(_live((SpanName.RL_PROMPT,), cols))
        if not rows:  # a Gym-only run: each open rollout is its own group
            rows = self.q(_live((SpanName.GYM_ROLLOUT,), cols, "AND prompt_idx IS NULL"))
        return sorted(rows, key=lambda r: (r["start_ns"], r["span_id"]))

    def fences(self) -> list[dict]:
        return self.q(_live(
            (SpanName.RL_ADMISSION_FENCE, SpanName.RL_WEIGHT_SYNC),
            f"name, span_id, start_ns, checkpoint_id, attributes->>'{Attr.FENCE_OWNER}' AS owner, "
            f"attributes->>'{Attr.TRAINER_VERSION}' AS trainer_version"))

    def windows(self) -> dict[str, dict]:
        rows = self.q(f"SELECT checkpoint_id, snapshot_index, start_ns, end_ns, outcome "
                      f"FROM {self.store.relation('checkpoint_windows')} WHERE run_id = $run "
                      "AND start_ns <= $at AND (end_ns IS NULL OR end_ns > $at)")
        return {r["checkpoint_id"]: r for r in rows}

    def shards(self) -> dict[int, dict]:
        rows = self.q(f"SELECT shard_idx, state, start_ns, trigger, last_error, backend_url, "
                      f"span_id FROM {self.store.relation('shard_states')} WHERE run_id = $run "
                      "AND start_ns <= $at AND (end_ns IS NULL OR end_ns > $at) "
                      "ORDER BY start_ns")
        return {r["shard_idx"]: r for r in rows}  # the latest stay of each shard

    def last_finished(self, shards: list[int]) -> dict[int, dict]:
        if not shards:
            return {}
        rows = self.q(
            "SELECT shard_idx, max(end_ns) FILTER (WHERE coalesce(http_status, 200) < 400 "
            "AND coalesce(status_code, '') <> 'ERROR') AS ok_ns, "
            "count(*) FILTER (WHERE http_status >= 400 OR status_code = 'ERROR') AS failed "
            f"FROM all_spans WHERE run_id = $run AND name = '{SpanName.ROUTER_REQUEST}' "
            "AND end_ns <= $at AND end_ns >= $floor AND list_contains($shards, shard_idx) "
            "GROUP BY shard_idx",
            floor=self.at - int(SHARD_LOOKBACK_S * 1e9), shards=shards)
        return {r["shard_idx"]: r for r in rows}

    def group_spans(self, traces: list[str], lo: int) -> list[dict]:
        """The waiting groups' tries, row dispatches, rows, verifies and model calls: the spans
        of their traces that began between the oldest group's start and the moment."""
        names = ", ".join(f"'{n}'" for n in (SpanName.RL_ATTEMPT, SpanName.GYM_ROLLOUT,
                                             SpanName.GYM_VERIFY, *_MODEL_SPANS))
        return self.q(
            "SELECT name, trace_id, span_id, rollout_id, attempt, start_ns, end_ns, "
            "failure_reason, http_status, status_code, "
            f"TRY_CAST(attributes->>'{Attr.RL_ATTEMPT}' AS INTEGER) AS rl_attempt, "
            f"attributes->>'{Attr.ROLLOUT_OUTCOME}' AS rollout_outcome "
            f"FROM all_spans WHERE run_id = $run AND name IN ({names}) "
            "AND start_ns BETWEEN $lo AND $at AND list_contains($traces, trace_id)",
            lo=lo, traces=traces)

    def parks(self, lo: int) -> list[dict]:
        return self.q(f"SELECT rollout_id, attempt, checkpoint_id, start_ns, span_id "
                      f"FROM {self.store.relation('parked_intervals')} WHERE run_id = $run "
                      "AND start_ns BETWEEN $lo AND $at AND (end_ns IS NULL OR end_ns > $at)",
                      lo=lo)

    def router_requests(self) -> list[dict]:
        """Router requests open at the moment, and those that failed within RETRY_WINDOW_S."""
        cols = (f"name, span_id, start_ns, end_ns, shard_idx, http_status, status_code, "
                f"attributes->>'{Attr.MODEL_CALL_ID}' AS call_id, "
                f"attributes->>'{Attr.BACKEND_URL}' AS backend_url")
        live = self.q(_live((SpanName.ROUTER_REQUEST,), cols))
        failed = self.q(
            f"SELECT {cols} FROM all_spans WHERE run_id = $run AND name = "
            f"'{SpanName.ROUTER_REQUEST}' AND end_ns <= $at AND end_ns >= $floor "
            "AND (http_status >= 400 OR status_code = 'ERROR')",
            floor=self.at - int(RETRY_WINDOW_S * 1e9))
        return live + failed

    # -- the answer ----------------------------------------------------------------------------
    def answer(self) -> WaitingOn:
        step = self.step()
        groups = self.groups()
        fences = self.fences()
        windows = self.windows() if any(f["checkpoint_id"] for f in fences) or groups else {}
        spans, parks, requests = [], [], []
        if groups:
            lo = min(g["start_ns"] for g in groups)
            spans = self.group_spans([g["trace_id"] for g in groups], lo)
            parks = self.parks(lo)
            requests = self.router_requests()
        shard_rows = self.shards()
        wanted = sorted({r["shard_idx"] for r in requests if r["shard_idx"] is not None})
        self.fleet = _Fleet(shard_rows, self.last_finished(wanted), self.at)
        self.windows_by_id = windows
        by_trace: dict[str, list[dict]] = {}
        for sp in spans:
            by_trace.setdefault(sp["trace_id"], []).append(sp)
        waiting = [self.classify(g, by_trace.get(g["trace_id"], []), fences, parks, requests)
                   for g in groups]
        return WaitingOn(run_id=self.run_id, at_ns=self.at, at_s=self.s(self.at), step=step,
                         answer=self.line(step, waiting, fences), waiting=len(waiting),
                         groups=tuple(waiting[:MAX_GROUPS]))

    def classify(self, g: dict, spans: list[dict], fences: list[dict], parks: list[dict],
                 requests: list[dict]) -> WaitingGroup:
        tries = sorted((s for s in spans if s["name"] == SpanName.RL_ATTEMPT),
                       key=lambda s: s["start_ns"])
        live_try = next((t for t in reversed(tries)
                         if t["end_ns"] is None or t["end_ns"] > self.at), None)
        gym_only = g["name"] == SpanName.GYM_ROLLOUT
        if live_try is None and not gym_only:
            return self._between_tries(g, tries, fences)
        if gym_only:
            rows = [g]
        else:
            mine = [s for s in spans if s["name"] == SpanName.GYM_ROLLOUT
                    and s["rl_attempt"] == live_try["attempt"]]
            rows = [s for s in mine if s["end_ns"] is None or s["end_ns"] > self.at]
        if not rows:
            if fences:  # a row re-dispatch held by a closed fence
                return self._between_tries(g, [], fences)
            back = max([live_try["start_ns"], *(s["end_ns"] for s in mine)])
            return self._make(g, None, WaitState.ROWS_BACK, "waiting for the try to commit "
                              "(every row is back)", back, _CONTROLLER, self.ev(live_try))
        options = [self._row(g, row, spans, parks, requests) for row in rows]
        return max(options, key=lambda w: (WaitState.SEVERITY[w.state]
                                           + (WaitState.TROUBLE if w.resource.in_trouble else 0),
                                           w.for_s))

    def _between_tries(self, g: dict, tries: list[dict], fences: list[dict]) -> WaitingGroup:
        sync = next((f for f in fences if f["name"] == SpanName.RL_WEIGHT_SYNC), None)
        fence = next((f for f in fences if f["name"] == SpanName.RL_ADMISSION_FENCE), None)
        if sync is not None or (fence is not None and fence["owner"] == "weight_sync"):
            shown = sync or fence
            version = sync["trainer_version"] if sync is not None else None
            name = "weight sync" + (f" (trainer version {version})" if version else "")
            res = Resource("weight_sync", name,
                           f"has been running for {self._for(shown['start_ns']):.0f} s",
                           in_trouble=True)
            return self._make(g, None, WaitState.ADMISSION, "waiting for admission, held shut "
                              f"by the {name}", max(g["start_ns"], shown["start_ns"]), res,
                              self.ev(shown))
        if fence is not None:
            res = self._snapshot(fence["checkpoint_id"], fence["start_ns"])
            return self._make(g, None, WaitState.ADMISSION, "waiting for admission, held shut "
                              f"by {res.name}", max(g["start_ns"], fence["start_ns"]), res,
                              self.ev(fence))
        if tries:
            last = tries[-1]
            why = last["failure_reason"] or last["rollout_outcome"] or "failed"
            return self._make(g, None, WaitState.REDISPATCH, f"waiting for a re-dispatch after "
                              f"try {last['attempt']} ended ({why})", last["end_ns"],
                              _CONTROLLER, self.ev(last))
        return self._make(g, None, WaitState.CONTROLLER, "waiting to be dispatched (no fence "
                          "closed)", g["start_ns"], _CONTROLLER, self.ev(g))

    def _row(self, g: dict, row: dict, spans: list[dict], parks: list[dict],
             requests: list[dict]) -> WaitingGroup:
        key = row["rollout_id"] or ""
        park = next((p for p in parks if p["rollout_id"] == key), None)
        if park is not None:
            res = self._snapshot(park["checkpoint_id"], park["start_ns"])
            return self._make(g, key, WaitState.PARKED, f"parked by {res.name}",
                              park["start_ns"], res,
                              Evidence(SpanName.AGENT_PARKED, park["span_id"],
                                       self.s(park["start_ns"])))
        mine = [r for r in requests if (r["call_id"] or "").startswith(key + ".")]
        live = [r for r in mine if r["end_ns"] is None or r["end_ns"] > self.at]
        if live:
            r = min(live, key=lambda r: r["start_ns"])
            res = self.fleet.resource(r["shard_idx"], r["backend_url"])
            return self._make(g, key, WaitState.GENERATING, f"generating on {res.name}",
                              r["start_ns"], res, self.ev(r))
        own = [s for s in spans if s["rollout_id"] == key]
        calls = [s for s in own if s["name"] in _MODEL_SPANS
                 and (s["end_ns"] is None or s["end_ns"] > self.at)]
        if calls:
            c = min(calls, key=lambda s: s["start_ns"])
            return self._make(g, key, WaitState.MODEL_CALL, "in a model call (no router "
                              "request seen)", c["start_ns"], Resource(
                                  "model_server", "the policy model server", "call open"),
                              self.ev(c))
        if mine:
            r = max(mine, key=lambda r: r["end_ns"])
            res = self.fleet.resource(r["shard_idx"], r["backend_url"])
            status = r["http_status"] or "an error"
            return self._make(g, key, WaitState.RETRYING, f"retrying a model call that "
                              f"failed on {res.name} with {status}", r["end_ns"], res,
                              self.ev(r))
        verify = [s for s in own if s["name"] == SpanName.GYM_VERIFY
                  and (s["end_ns"] is None or s["end_ns"] > self.at)]
        if verify:
            v = verify[0]
            return self._make(g, key, WaitState.VERIFYING, "verifying", v["start_ns"],
                              Resource("verifier", "the verifier", "verify open"), self.ev(v))
        ended = [s["end_ns"] for s in own if s["end_ns"] is not None and s["end_ns"] <= self.at]
        return self._make(g, key, WaitState.AGENT, "running in the agent (a tool call or "
                          "between turns)", max([row["start_ns"], *ended]),
                          Resource("agent", "the agent", "running"), self.ev(row))

    def _snapshot(self, checkpoint_id: str | None, start_ns: int) -> Resource:
        w = self.windows_by_id.get(checkpoint_id) or {}
        index = w.get("snapshot_index")
        name = (f"snapshot {index} ({checkpoint_id})" if index is not None
                else f"snapshot {checkpoint_id}")
        opened = w.get("start_ns", start_ns)
        return Resource("snapshot", name, f"has held admission closed for "
                        f"{self._for(opened):.0f} s", in_trouble=True)

    def _for(self, since_ns: int | None) -> float:
        return 0.0 if since_ns is None else max(0.0, (self.at - int(since_ns)) / 1e9)

    def _make(self, g: dict, rollout: str | None, state: str, doing: str, since_ns: int | None,
              resource: Resource, evidence: Evidence | None) -> WaitingGroup:
        return WaitingGroup(group=g["rollout_id"] or g["span_id"], prompt_idx=g["prompt_idx"],
                            rollout=rollout, state=state, doing=doing,
                            since_s=self.s(since_ns), for_s=round(self._for(since_ns), 3),
                            resource=resource, evidence=evidence)

    def line(self, step: int, waiting: list[WaitingGroup], fences: list[dict]) -> str:
        if not waiting:
            held = [f for f in fences if f["name"] == SpanName.RL_ADMISSION_FENCE]
            if not held:
                return f"step {step} waits on no prompt group; nothing is in flight"
            f = held[0]
            by = (self._snapshot(f["checkpoint_id"], f["start_ns"]).name if f["checkpoint_id"]
                  else "the weight sync" if f["owner"] == "weight_sync" else "a fence")
            return (f"step {step} waits on no prompt group; admission is held shut by {by} "
                    f"for {self._for(f['start_ns']):.0f} s")
        by: Counter[tuple[str, str]] = Counter()
        first: dict[tuple[str, str], WaitingGroup] = {}
        for w in waiting:
            k = (w.state, w.resource.name)
            by[k] += 1
            first.setdefault(k, w)
        parts = []
        for k, n in by.most_common():
            w = first[k]
            verb = "is" if n == 1 else "are"
            parts.append(f"{n} {verb} {w.doing}" + (f", which {w.resource.health}"
                                                   if w.resource.kind in ("shard", "weight_sync",
                                                                          "snapshot") else ""))
        return f"step {step} waits on {_groups(len(waiting))}; " + "; ".join(parts)


_CONTROLLER = Resource("controller", "the controller", "")


def _groups(n: int) -> str:
    return f"{n} group" if n == 1 else f"{n} groups"


class _Fleet:
    """Each shard's health at the moment: its fleet-health state and its last finished
    generation."""

    def __init__(self, states: dict[int, dict], finished: dict[int, dict], at_ns: int) -> None:
        self.states, self.finished, self.at = states, finished, at_ns

    def resource(self, shard: int | None, url: str | None) -> Resource:
        if shard is None:
            return Resource("shard", url or "an unnamed backend", "unknown")
        st = self.states.get(shard) or {}
        url = url or st.get("backend_url")
        name = f"shard {shard}" + (f" ({url})" if url else "")
        state = st.get("state") or "unknown"
        fin = self.finished.get(shard) or {}
        ok_ns = fin.get("ok_ns")
        if ok_ns is None:
            quiet_s = None
            quiet = f"has finished nothing for over {SHARD_LOOKBACK_S / 3600:.0f} h"
        else:
            quiet_s = (self.at - int(ok_ns)) / 1e9
            quiet = f"has finished nothing for {quiet_s:.0f} s"
        failed = fin.get("failed") or 0
        health = f"{quiet} ({state}" + (f", {failed} failed request(s)" if failed else "") + ")"
        if st.get("last_error") and state != "healthy":
            health += f": {st['last_error']}"
        trouble = state != "healthy" or quiet_s is None or quiet_s >= QUIET_S
        return Resource("shard", name, health, in_trouble=trouble)
