"""The timeline's rows: pure DataFrame -> DataFrame builders for what the lane plot, the rollout
gauges and the serving step line draw (``time_figures`` draws them as Bokeh figures), and the
key above them.

Rule: nothing here queries, filters by user choice or reads a clock. The caller (the Timeline
view, the Fleet view, the incident detail) hands over frames straight from the store's views,
already narrowed to the lanes it wants, plus ``t0_ns`` (the run's start, the x origin) and
``now_ns`` (the run's last seen time: where intervals still open are drawn to). The x axis is
seconds since the run started, the unit incident write-ups speak in ("the deadline fired at
180 s"). Legends are not drawn inside plots: ``key_html`` says what each colour and marker
means above them, so nothing covers the data and linked plots keep one frame width.
"""
from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from rolloutscope.dashboard import engine_lanes as el
from rolloutscope.dashboard import style
from rolloutscope.dashboard.selection import is_in, rows_where
from rolloutscope.vocabulary import SpanName

S = 1e9
RECT_COLUMNS = ["x0", "y0", "x1", "y1", "color", "lane", "what", "detail", "start_s", "end_s",
                "span_id", "span", "dur_s"]
MARK_COLUMNS = ["x", "y", "lane", "what", "detail"]
SPAN_COLUMNS = ["lane", "name", "start_ns", "end_ns", "span_id", "detail", "status"]
EVENT_COLUMNS = ["lane", "name", "ts_ns", "detail"]
HALF = 0.38  # half a lane's bar height


def _empty_frame(columns: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


@dataclass(frozen=True)
class TimelineFrames:
    """The view rows a timeline draws (each a frame of the store view of the same name), plus
    spans and events the model views do not hold (``spans``: SPAN_COLUMNS, ``events``:
    EVENT_COLUMNS), each on the lane it names: an incident's evidence read from all_spans, the
    train steps and weight syncs around a stall."""

    checkpoint_windows: pd.DataFrame
    checkpoint_ops: pd.DataFrame
    shard_states: pd.DataFrame
    rollout_attempts: pd.DataFrame
    parked_intervals: pd.DataFrame
    deadlines: pd.DataFrame
    completions: pd.DataFrame
    incidents: pd.DataFrame
    rollout_ids: Sequence[str] = ()  # rollout lanes to draw, in order
    evidence: frozenset[str] = field(default_factory=frozenset)  # span ids to outline
    spans: pd.DataFrame = field(default_factory=lambda: _empty_frame(SPAN_COLUMNS))
    events: pd.DataFrame = field(default_factory=lambda: _empty_frame(EVENT_COLUMNS))
    # ``bar_texts`` of some frames, made earlier for these very frames (a view keeps them per
    # frame version); any frame not here has its text made when drawn
    bar_texts: Mapping[str, dict] = field(default_factory=dict)
    # the engines' side (``engine_lanes``): each engine's scrapes, the requests it served, and
    # the engine behind each shard; empty for a run without engine data, which draws no lane
    engine_state: pd.DataFrame = field(default_factory=lambda: _empty_frame(
        ["engine", "address", "ts_ns", "running", "waiting", "kv_cache_usage",
         "preemptions_delta"]))
    engine_requests: pd.DataFrame = field(default_factory=lambda: _empty_frame(
        ["span_id", "engine_service", "engine_instance", "request_id", "start_ns", "end_ns",
         "duration_s", "queue_s", "ttft_s", "prompt_tokens", "completion_tokens",
         "finish_reason"]))
    shard_engines: pd.DataFrame = field(default_factory=lambda: _empty_frame(
        ["shard_idx", "address"]))

    # the plot and the key above it both ask for the lanes and the instants: made once
    @cached_property
    def lanes(self) -> Lanes:
        """``lanes_for`` these frames."""
        return lanes_for(self)

    def marks_at(self, t0_ns: int) -> dict[str, pd.DataFrame]:
        """``instants`` of these frames on their lanes, x in seconds since ``t0_ns``."""
        made = self.__dict__.setdefault("_marks_at", {})
        if t0_ns not in made:
            made[t0_ns] = instants(self, self.lanes, t0_ns)
        return made[t0_ns]


def group_rollout_ids(frame: pd.DataFrame, attempts: pd.DataFrame,
                      groups: pd.Series | None = None) -> pd.Series:
    """The RL prompt group's rollout id for each row of a Gym-side frame (parked intervals,
    completions). Gym names each row's execution (``p7-0``), RL the group (``p7``); rows and
    their group share ``prompt_idx``, so a row draws on its group's lane. ``groups``: the
    tries' ``prompt_groups``, when already made."""
    if not len(frame) or "prompt_idx" not in frame or not len(attempts):
        return frame["rollout_id"] if "rollout_id" in frame else pd.Series(dtype="object")
    groups = prompt_groups(attempts) if groups is None else groups
    return frame.prompt_idx.map(groups).fillna(frame.rollout_id)


def prompt_groups(attempts: pd.DataFrame) -> pd.Series:
    """``prompt_idx`` -> its prompt group's rollout id, from the first try listed (every try of
    a group names the same one). Of two columns only, and the ids of the first tries only
    taken: a run's tries are hundreds of thousands of rows of many columns."""
    prompts = attempts.prompt_idx
    first = (prompts.notna() & ~prompts.duplicated()).to_numpy(dtype=bool)
    ids = rows_where(attempts[["rollout_id"]], first).rollout_id
    return pd.Series(ids.array, index=pd.Index(prompts.array[first], name="prompt_idx"),
                     name="rollout_id")


@dataclass(frozen=True)
class Lanes:
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {label: i for i, label in enumerate(self.labels)})
        # one hash table for every lookup of a plot's rows (a dict through Series.map made a
        # Series of it each time: ~3 ms a call, a dozen calls a lane plot)
        object.__setattr__(self, "_positions", pd.Index(self.labels, dtype=object))

    def y(self, label: str) -> float:
        return -float(self._index[label])

    def positions(self, labels: pd.Series) -> np.ndarray:
        """Each label's lane number; -1 for a label that is no lane here."""
        return self._positions.get_indexer(labels.to_numpy(dtype=object))

    def ys(self, labels: pd.Series) -> np.ndarray:
        at = self.positions(labels).astype("float64")
        at[at < 0] = np.nan
        return -at

    @property
    def ticks(self) -> list[tuple[float, str]]:
        return [(-float(i), short_label(label)) for i, label in enumerate(self.labels)]


def short_label(label: str, width: int = style.LABEL_WIDTH_CHARS) -> str:
    """A lane label that fits the label column (the full one is in the hover)."""
    return label if len(label) <= width else label[: width - 1] + "…"


def _sec(ns: pd.Series | np.ndarray, t0_ns: int) -> np.ndarray:
    return (np.asarray(ns, dtype="float64") - t0_ns) / S


def _ends(df: pd.DataFrame, now_ns: int, col: str = "end_ns") -> np.ndarray:
    """End times with open intervals (NULL end) drawn up to now."""
    ends = pd.to_numeric(df[col], errors="coerce").astype("float64")
    return ends.fillna(float(now_ns)).to_numpy()


def _present(v: object) -> bool:
    return v is not None and not (isinstance(v, float) and np.isnan(v)) and v is not pd.NA


def _int(v: object) -> str:
    return "-" if not _present(v) else str(int(v))


def _text(s: pd.Series) -> pd.Series:
    """Text of a column, as Python strings; missing values as ''. A text column in one pass
    (a lane plot makes ~40 of these; three passes each were a tenth of its first render)."""
    if isinstance(s.dtype, pd.StringDtype):
        return pd.Series(s.to_numpy(dtype=object, na_value=""), index=s.index, dtype=object)
    return s.astype("object").where(s.notna(), "").astype(str)


def _ints(s: pd.Series) -> pd.Series:
    """Integers as text; missing values as '-'."""
    values = pd.to_numeric(s, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    return pd.Series([str(int(v)) if v == v else "-" for v in values], index=s.index,
                     dtype=object)


def participant_label(kind: object, instance: object) -> str:
    kind = str(kind) if kind is not None and not pd.isna(kind) else "participant"
    if instance is None or pd.isna(instance) or instance == "" or str(instance) == kind:
        return kind
    return f"{kind} {instance}"


def _participant_labels(kind: pd.Series, instance: pd.Series) -> pd.Series:
    k = _text(kind).replace("", "participant")
    i = _text(instance)
    return k.where((i == "") | (i == k), k + " " + i)


def shard_label(idx: object) -> str:
    return f"shard {int(idx)}"


def rollout_label(rollout_id: object, attempt: object = None) -> str:
    if attempt is None or pd.isna(attempt):
        return f"{rollout_id}"
    return f"{rollout_id} try {int(attempt)}"


def _rollout_labels(rollout_id: pd.Series, attempt: pd.Series) -> pd.Series:
    rid = _text(rollout_id)
    return rid.where(attempt.isna(), rid + " try " + _ints(attempt))


def attempt_label(r) -> str:
    """An attempt's lane: a Gym rollout attempt by the id Gym gave it (``0-0-a1``), an RL try
    as ``<rollout> try <n>``."""
    if getattr(r, "dialect", None) == "gym" and isinstance(getattr(r, "capture_key", None), str):
        return r.capture_key
    return rollout_label(r.rollout_id, r.attempt)


def _attempt_labels(att: pd.DataFrame) -> pd.Series:
    tries = _rollout_labels(att.rollout_id, att.attempt)
    if "dialect" not in att or "capture_key" not in att:
        return tries
    gym = (att.dialect == "gym") & att.capture_key.notna()
    return tries.where(~gym, _text(att.capture_key))


def _try_lanes(frames: TimelineFrames) -> list[str]:
    """One lane per try of ``frames.rollout_ids`` that some rollout frame has a row of, named as
    its bars are (``_attempt_labels``): in ``rollout_ids`` order, then by attempt (none first),
    then as the rows come. Ordered in Python: the lanes drawn are a few hundred rows, where
    joining, deduplicating and sorting the four frames in pandas took ~15 ms of a first
    render."""
    order = {str(r): i for i, r in enumerate(frames.rollout_ids)}
    rows = []
    for df in (frames.rollout_attempts, frames.parked_intervals, frames.deadlines,
               frames.completions):
        if not order or not len(df) or "rollout_id" not in df:
            continue
        at = [order.get(str(r)) for r in df.rollout_id.to_numpy(dtype=object, na_value=None)]
        keep = np.array([o is not None for o in at])
        if not keep.any():
            continue
        df = df[keep]
        if "attempt" in df:
            labels = _attempt_labels(df)
            attempt = pd.to_numeric(df.attempt, errors="coerce").fillna(-1)
        else:
            labels, attempt = _text(df.rollout_id), pd.Series(-1.0, index=df.index)
        rows += [(o, a, len(rows) + k, label) for k, (o, a, label) in enumerate(zip(
            (o for o in at if o is not None), attempt.to_numpy(dtype="float64"), labels))]
    rows.sort()
    return [label for *_, label in rows]


def lanes_for(frames: TimelineFrames) -> Lanes:
    """Context lanes (``frames.spans``) first, then checkpoint windows, participants in protocol
    order, shards, the engines (``engine_lanes.engine_lanes``) and one lane per rollout try in
    ``rollout_ids`` order."""
    labels: list[str] = list(dict.fromkeys(_text(frames.spans.lane))) if len(frames.spans) \
        else []
    if len(frames.checkpoint_windows) or len(frames.checkpoint_ops) or not (
            len(frames.shard_states) or len(frames.rollout_ids) or labels):
        labels.append("checkpoint windows")
    ops = frames.checkpoint_ops
    if len(ops):
        order = {"controller": 0, "environment": 1, "model": 2, "agent": 3, "resources": 4}
        parts = ops[["participant_kind", "instance"]].drop_duplicates()
        parts = parts.assign(
            _o=parts.participant_kind.map(order).fillna(9),
            _i=parts.instance.fillna("").astype(str)).sort_values(["_o", "_i"])
        labels += list(dict.fromkeys(_participant_labels(parts.participant_kind,
                                                         parts.instance)))
    if len(frames.shard_states):
        labels += [shard_label(i) for i in sorted(frames.shard_states.shard_idx.dropna().unique())]
    labels += el.engine_lanes(frames.engine_state, frames.engine_requests, frames.shard_engines)
    labels += _try_lanes(frames)
    return Lanes(tuple(dict.fromkeys(labels)))


def _fmt_end(end_s: np.ndarray, is_open: np.ndarray) -> list[str]:
    return ["open" if o else f"{e:,.1f}" for e, o in zip(end_s, is_open)]


def _block(df: pd.DataFrame, lanes: Lanes, t0_ns: int, now_ns: int, *, lane: pd.Series,
           color, what, detail, span, span_id: pd.Series, half: float = HALF,
           end_col: str = "end_ns") -> pd.DataFrame | None:
    """Bars for the rows of ``df`` whose lane is drawn; every per-row argument is aligned with
    ``df`` (a Series) or one value for all."""
    at = lanes.positions(lane)
    keep = at >= 0
    if not keep.any():
        return None

    def col(v):
        return v[keep].to_numpy() if isinstance(v, pd.Series) else v

    df = df[keep]
    x0 = _sec(df.start_ns, t0_ns)
    x1 = _sec(_ends(df, now_ns, end_col), t0_ns)
    is_open = df[end_col].isna().to_numpy()
    y = -at[keep].astype("float64")
    return pd.DataFrame({
        "x0": x0, "y0": y - half, "x1": x1, "y1": y + half, "color": col(color),
        "lane": col(lane), "what": col(what), "detail": col(detail), "start_s": np.round(x0, 3),
        "end_s": _fmt_end(x1, is_open), "span_id": col(span_id), "span": col(span),
        "dur_s": ["running" if o else f"{d:,.3f}" for d, o in zip(x1 - x0, is_open)]})


def _colors(values: pd.Series, palette: dict[str, str], default: str = style.NEUTRAL) -> pd.Series:
    return _text(values).map(palette).fillna(default)


BAR_FRAMES = ("spans", "checkpoint_windows", "checkpoint_ops", "shard_states",
              "rollout_attempts", "parked_intervals")  # the frames drawn as bars, bottom up


def interval_rects(frames: TimelineFrames, lanes: Lanes, t0_ns: int,
                   now_ns: int) -> pd.DataFrame:
    """One row per bar on the lane plot; ``end_s`` is the text 'open' for open intervals."""
    parts = []
    for name in BAR_FRAMES:
        df = getattr(frames, name)
        if len(df):
            texts = frames.bar_texts.get(name) or bar_texts(name, df)
            # parked bars sit inside the try's bar, which stays visible
            half = HALF / 2 if name == "parked_intervals" else HALF
            parts.append(_block(df, lanes, t0_ns, now_ns, half=half, **texts))
    if len(frames.engine_state):
        stays = el.state_stays(frames.engine_state)
        parts.append(_block(stays, lanes, t0_ns, now_ns,
                            **el.state_bar_texts(stays, frames.shard_engines)))
    if len(frames.engine_requests):
        df = frames.engine_requests
        texts = frames.bar_texts.get("engine_requests") or bar_texts("engine_requests", df)
        parts.append(_block(df, lanes, t0_ns, now_ns, **texts))
    parts = [p for p in parts if p is not None]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c[0] in "xy" else "object")
                             for c in RECT_COLUMNS})
    return pd.concat(parts, ignore_index=True)


def bar_texts(name: str, df: pd.DataFrame) -> dict[str, object]:
    """The text of the bars of frame ``name`` (one of ``BAR_FRAMES``, or ``engine_requests``:
    ``engine_lanes.request_bar_texts``), row by row: ``lane``,
    ``color``, ``what``, ``detail``, ``span`` and ``span_id`` (a Series aligned with ``df``, or
    one value for all). It depends on the frame alone (not on the lanes, the time axis or now),
    so a view remembers it per frame version (``TimelineFrames.bar_texts``): a live tick's
    redraw remakes only the text of frames that changed."""
    ids = (lambda df: _text(df.span_id) if "span_id" in df else  # noqa: E731
           pd.Series([""] * len(df), index=df.index))
    if name == "spans":
        status = _text(df.status)
        return dict(lane=_text(df.lane),
                    color=status.map({"ERROR": style.ERROR, "incident": style.INCIDENT_SPAN})
                    .fillna(style.INFO).where(df.end_ns.notna() | (status == "incident"),
                                              style.OPEN),
                    what=_text(df.name), detail=_text(df.detail), span=_text(df.name),
                    span_id=_text(df.span_id))
    if name == "checkpoint_windows":
        ck = _text(df.checkpoint_id)
        return dict(lane=pd.Series("checkpoint windows", index=df.index),
                    color=_colors(df.outcome, style.OUTCOME_COLORS), what="checkpoint " + ck,
                    detail="window " + _text(df.outcome),
                    span="admission closed → reopened", span_id="window:" + ck)
    if name == "checkpoint_ops":
        outcome = _text(df.outcome)
        detail = outcome.replace("", "running")
        code = _text(df.code)
        detail = detail.where(code == "", detail + " (" + code + ")")
        blockers = pd.to_numeric(df.blockers, errors="coerce").fillna(0)
        detail = detail.where(blockers <= 0, detail + ", " + _ints(df.blockers) + " blockers")
        op = _text(df.op)
        span = ("gym.checkpoint." + op).where(
            df.participant_kind != "controller", SpanName.CK_COORDINATE_PREFIX + op)
        return dict(lane=_participant_labels(df.participant_kind, df.instance),
                    color=_colors(outcome.replace("", "open"), style.OUTCOME_COLORS),
                    what=op + " " + _text(df.checkpoint_id), detail=detail, span=span,
                    span_id=ids(df))
    if name == "shard_states":
        trig = _text(df.trigger).replace("", "-")
        err = _text(df.last_error)
        detail = "trigger " + trig + ", epoch " + _ints(df.membership_epoch)
        detail = detail.where(err == "", detail + ", error " + err)
        return dict(lane="shard " + _ints(df.shard_idx),
                    color=_colors(df.state, style.SHARD_COLORS), what=_text(df.state),
                    detail=detail, span=SpanName.SHARD_STATE, span_id=ids(df))
    if name == "rollout_attempts":
        outcome = _text(df.outcome)
        gym = (df.dialect == "gym") if "dialect" in df else pd.Series(False, index=df.index)
        reason = _text(df.failure_class) + ": " + _text(df.failure_reason)
        group = _text(df.group_id)
        detail = reason.where(df.failure_class.notna(),
                              ("group " + group).where(group != "", ""))
        return dict(lane=_attempt_labels(df),
                    color=_colors(outcome, style.OUTCOME_COLORS).where(
                        ~outcome.isin(["open", "committed", "finished"]), style.ROLLOUT_RUNNING),
                    what=("try " + _ints(df.attempt) + " " + outcome).where(
                        ~gym, "Gym rollout " + _text(df.get("capture_key", df.rollout_id))
                        + " " + outcome),
                    detail=detail,
                    span=pd.Series(SpanName.RL_ATTEMPT, index=df.index).where(
                        ~gym, SpanName.GYM_ROLLOUT), span_id=ids(df))
    if name == "engine_requests":
        return el.request_bar_texts(df)
    if name == "parked_intervals":
        return dict(lane=_rollout_labels(df.rollout_id, df.attempt), color=style.PARKED,
                    what="try " + _ints(df.attempt) + " parked",
                    detail="by checkpoint " + _text(df.checkpoint_id),
                    span=SpanName.AGENT_PARKED, span_id=ids(df))
    raise ValueError(f"no bars are drawn for frame {name!r}; bars come from {BAR_FRAMES}")


def instants(frames: TimelineFrames, lanes: Lanes, t0_ns: int) -> dict[str, pd.DataFrame]:
    """Instants on their lanes: deadline start / fire, completion, ACK, and the events of
    ``frames.events`` (a watchdog's stall line, an injected fault)."""
    out: dict[str, pd.DataFrame] = {}

    def points(x, lane: pd.Series, what, detail) -> pd.DataFrame:
        at = lanes.positions(lane)
        keep = (at >= 0) & ~np.isnan(np.asarray(x, dtype="float64"))

        def col(v):
            return np.asarray(v.to_numpy() if isinstance(v, pd.Series) else
                              [v] * len(lane), dtype=object)[keep]

        return pd.DataFrame({"x": np.asarray(x, dtype="float64")[keep],
                             "y": -at[keep].astype("float64"), "lane": col(lane),
                             "what": col(what), "detail": col(detail)}, columns=MARK_COLUMNS)

    d = frames.deadlines
    dl = _rollout_labels(d.rollout_id, d.attempt) if len(d) else pd.Series(dtype=object)
    out["deadline start"] = points(_sec(d.start_ns, t0_ns), dl,
                                   _text(d.kind) + " deadline, budget "
                                   + pd.to_numeric(d.budget_s).map("{:g} s".format)
                                   if len(d) else "", "try " + _ints(d.attempt) if len(d) else "")
    fired = pd.to_numeric(d.fired_ns, errors="coerce") if len(d) else pd.Series(dtype="float64")
    out["deadline fired"] = points(_sec(fired, t0_ns), dl, "deadline fired",
                                   "while " + _text(d.state_when_fired).replace("", "unknown")
                                   if len(d) else "")
    c = frames.completions
    cl = _rollout_labels(c.rollout_id, c.attempt) if len(c) else pd.Series(dtype=object)
    acked = c.ack_ns.notna() if len(c) else pd.Series(dtype=bool)
    tries = "try " + _ints(c.attempt) if len(c) else ""
    for kind, mask in (("completed", acked), ("completed, unacknowledged", ~acked)):
        sub = c[mask] if len(c) else c
        out[kind] = points(_sec(sub.completed_ns, t0_ns), cl[mask] if len(c) else cl, kind,
                           tries[mask] if len(c) else "")
    out["acknowledged"] = points(_sec(pd.to_numeric(c.ack_ns, errors="coerce"), t0_ns)
                                 if len(c) else [], cl, "acknowledged", tries)
    ev = frames.events
    out["event"] = points(_sec(ev.ts_ns, t0_ns) if len(ev) else [],
                          _text(ev.lane) if len(ev) else pd.Series(dtype=object),
                          _text(ev.name) if len(ev) else "", _text(ev.detail) if len(ev) else "")
    return {k: out[k] for k in MARKER_STYLE}  # x and y are float64 (``points``)


def shaded_periods(incidents: pd.DataFrame, kinds: Iterable[str], t0_ns: int,
                   now_ns: int) -> pd.DataFrame:
    """x-intervals of incidents of the given kinds (stalls), open ones to now."""
    inc = incidents[incidents.kind.isin(list(kinds))]
    return pd.DataFrame({
        "x0": _sec(inc.start_ns, t0_ns), "x1": _sec(_ends(inc, now_ns), t0_ns),
        "what": inc.kind.astype(str).to_numpy(), "detail": inc.summary.astype(str).to_numpy()})


MIN_BAR_FRACTION = 0.004  # of the time axis: ~4 px on a 1000 px plot
RECT_TOOLTIPS = [("lane", "@lane"), ("", "@what"), ("span", "@span"), ("", "@detail"),
                 ("from (s)", "@start_s"), ("to (s)", "@end_s"), ("duration (s)", "@dur_s")]
SHADE_TOOLTIPS = [("", "@what"), ("", "@detail")]


def mark_tooltips(t: str) -> list[tuple[str, str]]:
    return [("lane", "@lane"), ("", "@what"), ("", "@detail"), ("at (s)", f"@{t}{{0,0.0}}")]


MARKER_STYLE = {
    "deadline start": {"marker": "triangle", "color": "#3d3d3d", "size": 8},
    "deadline fired": {"marker": "x", "color": style.ERROR, "size": 13, "line_width": 3},
    "completed": {"marker": "circle", "color": "#2f6f8f", "size": 8},
    "completed, unacknowledged": {"marker": "circle", "fill_color": "white",
                                  "line_color": style.ERROR, "line_width": 2.5, "size": 11},
    "acknowledged": {"marker": "diamond", "color": style.OK, "size": 10},
    "event": {"marker": "inverted_triangle", "color": style.WARN, "line_color": "#6b4a10",
              "size": 13},
}
MARKER_SYMBOLS = {"deadline start": ("▲", "#3d3d3d"), "deadline fired": ("✖", style.ERROR),
                  "completed": ("●", "#2f6f8f"), "completed, unacknowledged": ("○", style.ERROR),
                  "acknowledged": ("◆", style.OK), "event": ("▼", style.WARN)}


def bar_styles(rects: pd.DataFrame, evidence: Iterable[str] = ()) -> pd.DataFrame:
    """``rects`` as the bars of one layer: closed bars (white hairline), open ones (faded,
    dashed grey outline), then the incident's evidence (a dark outline), each drawn over the
    ones before it."""
    is_open = rects.end_s.eq("open").to_numpy(dtype=bool)
    evid = rects.span_id.isin(evidence).to_numpy(dtype=bool) if evidence and len(rects) \
        else np.zeros(len(rects), dtype=bool)
    kind = np.where(evid, 2, np.where(is_open, 1, 0))
    out = rects.assign(
        fill_alpha=np.where(is_open, 0.45, 1.0),
        line=np.select([evid, is_open], [style.EVIDENCE, style.OPEN_OUTLINE], "white"),
        line_width=np.select([evid, is_open], [2.5, 1.0], 0.5),
        dash=np.where(is_open & ~evid, "dashed", "solid"))
    return out.iloc[np.argsort(kind, kind="stable")].reset_index(drop=True)


def text_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its text columns typed as text (pandas' ``string``), not as Python objects.

    HoloViews takes the range of every column of an element before drawing it: an object
    column's is a scan of its values (a third of a lane plot's first render), a ``string``
    column's none. Bokeh draws both alike; a missing value still reaches the browser as null."""
    obj = [c for c in df.columns if df[c].dtype == object and _holds_text(df[c])]
    return df.astype(dict.fromkeys(obj, "string")) if obj else df


def _holds_text(col: pd.Series) -> bool:
    """Whether an object column holds text (its first value that is not missing is a str):
    an empty column, or one of numbers, stays as it is."""
    for value in col.to_numpy():
        if isinstance(value, str):
            return True
        if not (value is None or value is pd.NA or (isinstance(value, float) and value != value)):
            return False
    return False


def focus_range(incident, frames: TimelineFrames, *, t0_ns: int, now_ns: int,
                pad: float = 0.12) -> tuple[float, float]:
    """The x-range that shows an incident: its own interval and every evidence bar, padded."""
    end = incident["end_ns"] if pd.notna(incident["end_ns"]) else now_ns
    lo, hi = (incident["start_ns"] - t0_ns) / S, (end - t0_ns) / S
    if frames.evidence:
        rects = interval_rects(frames, lanes_for(frames), t0_ns, now_ns)
        ev = rects[rects.span_id.isin(frames.evidence)]
        if len(ev):
            lo, hi = min(lo, float(ev.x0.min())), max(hi, float(ev.x1.max()))
    return pad_range(lo, hi, pad)


def pad_range(lo: float, hi: float, pad: float = 0.12) -> tuple[float, float]:
    width = max(hi - lo, 10.0)
    return (max(lo - pad * width, 0.0) if lo >= 0 else lo - pad * width, hi + pad * width)


MARK_STYLE_COLUMNS = ["marker", "size", "fill", "line", "line_width"]


def marker_points(marks: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every kind of instant in one frame, each row with its kind's marker, size and colours
    (``MARKER_STYLE``), in the kinds' order, so later kinds draw on top: one layer for all
    instants instead of one per kind (each layer of a plot costs its first render ~30 ms)."""
    # column by column in numpy: a frame per kind joined by pandas cost ~5 ms for a few rows
    numeric = ("x", "y", "size", "line_width")
    parts: dict[str, list[np.ndarray]] = {c: [] for c in MARK_COLUMNS + MARK_STYLE_COLUMNS}
    for kind, mk in marks.items():
        st, n = MARKER_STYLE[kind], len(mk)
        for c in MARK_COLUMNS:
            parts[c].append(mk[c].to_numpy(dtype="float64" if c in numeric else object))
        for c, v in (("marker", st["marker"]), ("size", float(st["size"])),
                     ("fill", st.get("fill_color", st.get("color"))),
                     ("line", st.get("line_color", st.get("color"))),
                     ("line_width", float(st.get("line_width", 1.0)))):
            parts[c].append(np.full(n, v, dtype="float64" if c in numeric else object))
    return pd.DataFrame({c: np.concatenate(v) if v else
                         np.array([], dtype="float64" if c in numeric else object)
                         for c, v in parts.items()})


# -- what the colours and markers mean, above the plots --------------------------------------
def lane_key(frames: TimelineFrames, *, t0_ns: int = 0, markers: bool = True,
             highlight: bool = False) -> list[tuple[str, str, str]]:
    """(label, symbol, colour) for each kind of bar and marker these frames draw (``t0_ns``:
    the plot's, so the instants it drew are not made again)."""
    out: list[tuple[str, str, str]] = []
    if len(frames.incidents) and (frames.incidents.kind == "stall").any():
        out.append(("stall", "■", "#f6d5da"))
    if highlight:
        out.append(("selected incident", "■", "#f9e3a7"))
    if len(frames.spans) and (frames.spans.status == "incident").any():
        out.append(("the incident", "■", style.INCIDENT_SPAN))
    if len(frames.rollout_attempts):
        out.append(("try running / committed", "■", style.ROLLOUT_RUNNING))
    states = set()
    for df, col in ((frames.checkpoint_windows, "outcome"), (frames.checkpoint_ops, "outcome"),
                    (frames.rollout_attempts, "outcome")):
        if len(df):
            states |= set(_text(df[col]).replace("", "open"))
    for label, keys, color in (("ok / committed", {"ok", "committed", "published"}, style.OK),
                               ("failed / error", {"failed", "error"}, style.ERROR),
                               ("aborted / cancelled", {"aborted", "cancelled"}, style.WARN),
                               ("running (dashed)", {"open"}, style.OPEN)):
        if states & keys:
            out.append((label, "■", color))
    if len(frames.parked_intervals):
        out.append(("parked by a snapshot", "■", style.PARKED))
    if len(frames.shard_states):
        for state in dict.fromkeys(_text(frames.shard_states.state)):
            out.append((f"shard {state}", "■", style.shard_color(state)))
    out += el.key_entries(frames.engine_state, frames.engine_requests)
    if len(frames.evidence):
        out.append(("evidence (outlined)", "□", style.EVIDENCE))
    if markers:
        for kind, mk in frames.marks_at(t0_ns).items():
            if len(mk):
                symbol, color = MARKER_SYMBOLS[kind]
                out.append((kind if kind != "event" else "event (hover for what)", symbol, color))
    return out


def key_html(entries: Iterable[tuple[str, str, str]], *, note: str = "") -> str:
    """The key as one line of HTML; every label escaped."""
    items = "".join(f"<span class='rs-key'><span style='color:{html.escape(c)}'>"
                    f"{html.escape(sym)}</span> {html.escape(label)}</span>"
                    for label, sym, c in entries)
    tail = f"<span class='rs-note'>{html.escape(note)}</span>" if note else ""
    return f"<div class='rs-keys'>{items}{tail}</div>"


# -- aggregates: every rollout, however many lanes are drawn ---------------------------------
GAUGE_POINTS = 2000  # a gauge with more changes than this is sampled at this many instants


def _bins(values: np.ndarray, at: np.ndarray, *, step: float | None = None) -> np.ndarray:
    """For each of ``values`` (unsorted), the first instant of the sorted ``at`` at or after
    it: ``values[k] <= at[i]`` iff ``i >= _bins(values, at)[k]``.

    ``step``: ``at`` is evenly spaced by it (``np.linspace``), so a value's instant is the
    ceiling of its distance from the first in steps, a division instead of a binary search (at
    10M spans searching the 1.6M starts and ends of the tries took ~30 ms). A value within a
    few float spacings of an instant, where rounding could put it next door, or missing, is
    searched for."""
    values = np.asarray(values, dtype="float64")
    if step is None or len(at) < 2 or not len(values):
        return np.searchsorted(at, values, side="left")
    steps = (values - at[0]) / step
    slack = 64 * np.spacing(max(abs(at[0]), abs(at[-1]))) / step
    unsure = ~(np.abs(steps - np.rint(steps)) > slack)  # NaN: unsure
    out = np.clip(np.ceil(np.where(unsure, 0.0, steps)), 0, len(at)).astype(np.int64)
    out[unsure] = np.searchsorted(at, values[unsure], side="left")
    return out


def _at_or_before(bins: np.ndarray, n: int) -> np.ndarray:
    """For each of ``n`` instants, how many values are at or before it, from their ``_bins``:
    a running count, no sort of the values."""
    return np.cumsum(np.bincount(bins, minlength=n + 1))[:n]


def rollout_gauges_frame(attempts: pd.DataFrame, *, t0_ns: int, now_ns: int,
                         max_points: int = GAUGE_POINTS) -> tuple[pd.DataFrame, bool]:
    """Tries in flight and tries committed so far (Gym: finished), over time, as steps; and
    whether they were sampled (more than ``max_points`` changes) rather than drawn exactly.

    No sort of the tries: each gauge is a count per instant (``_at_or_before``); sorting the
    809k tries of a 10M-span run three times took 0.13 s of a first render. A commit is an
    end: its instant is its end's, looked up once."""
    if not len(attempts):
        return pd.DataFrame({"t": [], "in_flight": [], "committed": []}, dtype="float64"), False
    starts = attempts.start_ns.to_numpy(dtype="float64")
    end = pd.to_numeric(attempts.end_ns, errors="coerce")
    ended = end.notna().to_numpy()
    ends = end.to_numpy(dtype="float64", na_value=np.nan)[ended]
    committed_end = is_in(attempts.outcome, ["committed", "finished"])[ended]
    # commits are ends: they add no change time. More distinct times among the first few
    # thousand than max_points settles it; only a run with fewer needs them all counted
    edges = [[float(t0_ns), float(now_ns)], starts, ends]
    sampled = len(pd.unique(np.concatenate([v[:4 * max_points] for v in edges]))) > max_points
    if not sampled:
        changes = np.unique(np.concatenate(edges))
        sampled = len(changes) > max_points
    step = None
    if sampled:  # evenly spaced: ``_bins`` divides instead of searching
        at, step = np.linspace(float(t0_ns), float(now_ns), max_points, retstep=True)
    else:
        at = changes
    kept = (at >= min(float(t0_ns), float(np.nanmin(starts)))) & (at <= float(now_ns))
    if not kept.all():
        at, step = at[kept], None
    end_bins = _bins(ends, at, step=step)
    inflight = (_at_or_before(_bins(starts, at, step=step), len(at))
                - _at_or_before(end_bins, len(at)))
    committed = _at_or_before(end_bins[committed_end], len(at))
    return pd.DataFrame({"t": _sec(at, t0_ns), "in_flight": inflight.astype("float64"),
                         "committed": committed.astype("float64")}), sampled


def serving_steps(shard_states: pd.DataFrame, *, t0_ns: int, now_ns: int) -> pd.DataFrame:
    """Serving shard count over time (a step function) from shard state stays.

    Each serving stay adds one at its start and removes one at its end; a stay still open
    counts up to now.
    """
    s = shard_states[shard_states.serving.fillna(False).astype(bool)]
    ups = pd.DataFrame({"ns": s.start_ns.astype("int64"), "d": 1})
    downs = pd.DataFrame({"ns": s.end_ns.dropna().astype("int64"), "d": -1})
    ev = pd.concat([ups, downs]).groupby("ns", as_index=False).d.sum().sort_values("ns")
    t = _sec(ev.ns, t0_ns)
    n = ev.d.cumsum().to_numpy()
    if len(t):
        t = np.append(t, (now_ns - t0_ns) / S)
        n = np.append(n, n[-1])
    return pd.DataFrame({"t": t, "serving": n.astype("float64")})


SERVING_LINES = {  # what: (colour, dash, width), drawn in this order
    "shards in fleet": (style.NEUTRAL, "dashed", 1.0),
    "fleet serving shards": (style.OK, "solid", 2.0),
    "router serving backends": (style.INFO, "dotdash", 1.5),
}
SEGMENT_COLUMNS = ["t", "y0", "t_end", "y1", "serving", "what", "color", "dash", "width"]


def step_segments(t: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray,
                  what: str) -> pd.DataFrame:
    """A step line (each value held until the next change) as segments: one level per value
    to the next time, then the rise or fall to the next value. ``serving`` is the value a
    hover reports: the level held, or the one a rise or fall reaches."""
    t, v = np.asarray(t, dtype="float64"), np.asarray(values, dtype="float64")
    if len(t) != len(v):
        raise ValueError(f"{what}: {len(t)} times but {len(v)} values")
    color, dash, width = SERVING_LINES[what]
    if len(t) < 2:
        return pd.DataFrame({c: pd.Series([], dtype=object if c in ("what", "color", "dash")
                                          else "float64") for c in SEGMENT_COLUMNS})
    moves = v[:-1] != v[1:]
    x0 = np.concatenate([t[:-1], t[1:][moves]])
    x1 = np.concatenate([t[1:], t[1:][moves]])
    y0 = np.concatenate([v[:-1], v[:-1][moves]])
    y1 = np.concatenate([v[:-1], v[1:][moves]])
    return pd.DataFrame({"t": x0, "y0": y0, "t_end": x1, "y1": y1, "serving": y1,
                         "what": what, "color": color, "dash": dash, "width": width})


def serving_segments(shard_states: pd.DataFrame, *, t0_ns: int, now_ns: int,
                     router: pd.DataFrame | None = None,
                     fleet: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every line of the serving plot as segments (``SEGMENT_COLUMNS``): the fleet's total
    shard count (a reference), its serving shards (from shard stays; ``fleet``, its serving
    count as sampled, where the run has no stays) and the router's serving backends."""
    steps = serving_steps(shard_states, t0_ns=t0_ns, now_ns=now_ns)
    if not len(steps) and fleet is not None and len(fleet):
        steps = fleet[["t", "serving"]]
    total = float(shard_states.shard_idx.nunique()) if len(shard_states) else 0.0
    span = (0.0, max((now_ns - t0_ns) / S, 1.0))
    rt = router if router is not None else pd.DataFrame({"t": [], "serving": []})
    parts = [step_segments(span if total else [], [total] * 2 if total else [],
                           "shards in fleet"),
             step_segments(steps.t, steps.serving, "fleet serving shards"),
             step_segments(rt.t, rt.serving, "router serving backends")]
    return pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)


SERVING_KEY = [("shards in the fleet", "┄", style.NEUTRAL),
               ("fleet serving shards", "━", style.OK),
               ("router serving backends", "━", style.INFO)]
