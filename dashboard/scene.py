"""What the Incident tab draws for one incident: its lanes, bars and markers, and which of the
gauges and the serving line tell the rest. Pure: an incident row, the model-view frames and the
context the DataStore read around it (``DataStore.incident_context``) in, a ``Scene`` out.

Every kind draws the incident itself on its own lane (its interval, or a marker for an instant),
so no incident is an empty plot, and then what its summary talks about:

- rollout kinds (a deadline fired while parked, a stranded completion, a late retired attempt,
  redispatch exhausted, a data failure): the tries it names, their parked stays, deadline
  markers and completions, and the snapshot windows around them;
- checkpoint kinds (prepare blocked, export failed, lease expired, cut degraded): the
  participants' operations of the checkpoint it names;
- fleet kinds (quarantine, wedged backend, stale weights, router/fleet divergence): the shard
  lanes and the serving line, fleet against router;
- the stall: the gauges (committed flat, what was or was not in flight), the watchdog's stall
  line, the train steps that stopped and the weight sync that held them.

Evidence spans no model view holds (an HTTP request, a watchdog tick) get lanes named after
them, with their events as markers; hovering any of them shows its attributes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from rolloutscope.dashboard import timeline_plot as tl
from rolloutscope.store.store import as_text
from rolloutscope.vocabulary import EventName

S = 1e9
FLEET_KINDS = frozenset({"quarantine", "router_fleet_divergence", "wedged_backend",
                         "stale_weights_serving", "redispatch_exhausted"})
GAUGE_KINDS = frozenset({"stall", "redispatch_exhausted", "lease_expired"})
ALL_SHARDS = frozenset({"quarantine", "router_fleet_divergence", "stale_weights_serving",
                        "redispatch_exhausted"})
MAX_INCIDENT_ROLLOUTS = 30
INCIDENT_LANE = "incident"
EVENT_NAMES = {EventName.STALL: "the watchdog's stall line"}


@dataclass(frozen=True)
class Scene:
    frames: tl.TimelineFrames
    gauges: bool  # draw the rollout gauges under the lanes
    serving: bool  # draw fleet against router serving under the lanes
    marks: pd.DataFrame  # vertical marks on the gauges: t (s), what, detail


def _subject_shards(subject: str) -> set[int]:
    return {int(m) for m in re.findall(r"\bshard (\d+)\b", subject or "")}


def _subject_checkpoints(subject: str, known: Sequence[str]) -> set[str]:
    return {ck for ck in known if ck and ck in (subject or "")}


def incident_scene(incident: Mapping, frames: Mapping[str, pd.DataFrame], *, t0_ns: int,
                   now_ns: int, rollout_ids: Sequence[str], context: tuple[pd.DataFrame,
                                                                           pd.DataFrame],
                   stall_timeout_s: float | None = None) -> Scene:
    """The lanes and plots that tell ``incident``'s story. ``frames``: the model-view frames
    (parked intervals and completions already on their prompt group's lane), ``rollout_ids``:
    the rollouts it names, ``context``: ``DataStore.incident_context``."""
    kind = str(incident["kind"])
    subject = str(incident.get("subject") or "")
    raw = incident.get("evidence")
    ev = frozenset(str(e) for e in (list(raw) if raw is not None
                                    and not isinstance(raw, (str, float)) else []))
    ids = list(rollout_ids)[:MAX_INCIDENT_ROLLOUTS]
    keep = set(map(str, ids))

    def rollouts(name: str) -> pd.DataFrame:
        df = frames[name]
        return df[as_text(df.rollout_id).isin(keep)] if len(df) else df

    ops = frames["checkpoint_ops"]
    cks: set[str] = set()
    for name in ("checkpoint_ops", "parked_intervals"):
        df = frames[name]
        if len(df):
            cks |= set(df.checkpoint_id[df.span_id.isin(ev)].dropna().astype(str))
    if len(ops):
        cks |= _subject_checkpoints(subject, list(ops.checkpoint_id.dropna().astype(str).unique()))
        ops = ops[ops.checkpoint_id.astype(str).isin(cks) | ops.span_id.isin(ev)]
    sh = frames["shard_states"]
    if len(sh) and kind not in ALL_SHARDS:
        named = set(sh.shard_idx[sh.span_id.isin(ev)].dropna().astype(int))
        named |= _subject_shards(subject)
        sh = sh[sh.shard_idx.isin(named)]
    start = int(incident["start_ns"])
    end = int(incident["end_ns"]) if pd.notna(incident.get("end_ns")) else None
    spans, events = context
    title = kind.replace("_", " ")
    own = pd.DataFrame({"lane": [INCIDENT_LANE], "name": [title], "start_ns": [start],
                        "end_ns": [end], "span_id": [f"incident:{incident['incident_id']}"],
                        "detail": [str(incident.get("summary") or "")],
                        "status": ["incident"]}, columns=tl.SPAN_COLUMNS)
    own = own.astype({"end_ns": "float64"})  # an open incident has none
    spans = pd.concat([own, spans.astype({"end_ns": "float64"})], ignore_index=True) \
        if len(spans) else own
    instant = end is not None and end - start < 0.002 * max(now_ns - t0_ns, 1)
    marks = []
    if len(events):
        events = events.assign(name=events.name.map(EVENT_NAMES).fillna(events.name))
        ts = events[events.name == EVENT_NAMES[EventName.STALL]]
        marks += [((int(t) - t0_ns) / S, n, d) for t, n, d in zip(ts.ts_ns, ts.name, ts.detail)]
    if instant:
        at = pd.DataFrame({"lane": [INCIDENT_LANE], "name": [f"{title} (at this instant)"],
                           "ts_ns": [start], "detail": [str(incident.get("summary") or "")]},
                          columns=tl.EVENT_COLUMNS)
        events = pd.concat([at, events], ignore_index=True) if len(events) else at
    if kind == "stall" and stall_timeout_s:
        due = (start - t0_ns) / S + float(stall_timeout_s)
        marks.append((due, "stall_timeout_s passes",
                      f"{stall_timeout_s:g} s without progress: the watchdog's stall line is "
                      f"due"))
    windows = frames["checkpoint_windows"]
    out = tl.TimelineFrames(
        checkpoint_windows=windows if len(ops) or len(rollouts("parked_intervals")) or ids
        else windows.iloc[:0],
        checkpoint_ops=ops, shard_states=sh,
        rollout_attempts=rollouts("rollout_attempts"),
        parked_intervals=rollouts("parked_intervals"), deadlines=rollouts("deadlines"),
        completions=rollouts("completions"), incidents=frames["incidents"],
        rollout_ids=tuple(ids), evidence=ev, spans=spans, events=events)
    return Scene(frames=out, gauges=kind in GAUGE_KINDS,
                 serving=kind in FLEET_KINDS,
                 marks=pd.DataFrame(marks, columns=["t", "what", "detail"]))
