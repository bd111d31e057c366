"""Engine lanes: the generation engines' side of the run, on the lane plot beside the shards.

Rule: pure, like ``timeline_plot`` (which draws these lanes with its own): frames straight from
the store's views in, lane labels and bar rows out; nothing here queries or reads a clock.

Two kinds of lane, because the two things an engine says of itself name it differently
(docs/engines.md, "One run, one clock"):

- a state lane per engine as its ``/metrics`` were scraped (``engine_state``: named
  ``engine HOST:PORT #IDX``), one bar per scrape held until the engine's next scrape, coloured
  by what the scrape said (idle, serving, a backlog waiting, preempting). Its hover names the
  shards served at that address (``shard_engines``), so the lane sits under the shard lanes it
  serves.
- a request lane per engine as its traces name it (``engine_requests``: its ``service.name``
  and ``vllm.process_id``), one bar per ``llm_request`` span from arrival to end, coloured by
  whether it spent most of that time queued.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rolloutscope.dashboard import style
from rolloutscope.vocabulary import SpanName

QUEUED_SHARE = 0.5  # a request that waited this share of its time or more is drawn as queued
# what a scrape says the engine was doing (``scrape_states``), in the key's order
STATES = ("idle", "serving", "backlog", "preempting", "unread")


def _text(s: pd.Series) -> pd.Series:
    return s.astype("object").where(s.notna(), "").astype(str)


def _num(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce")


def _fmt(values: pd.Series, fmt: str) -> pd.Series:
    return pd.Series([fmt.format(v) if v == v else "-" for v in
                      _num(values).to_numpy(dtype="float64", na_value=np.nan)],
                     index=values.index, dtype=object)


def request_lane_labels(requests: pd.DataFrame) -> pd.Series:
    """Each request's lane: ``engine SERVICE INSTANCE`` (the instance left out when unknown)."""
    service = _text(requests.engine_service).replace("", "engine")
    instance = _text(requests.engine_instance)
    return ("engine " + service).where(instance == "", "engine " + service + " " + instance)


def state_stays(state: pd.DataFrame) -> pd.DataFrame:
    """``engine_state`` with each scrape's stay: ``start_ns`` its read, ``end_ns`` the engine's
    next read, same index. An engine's last read is a stay of no width: what it did after
    is not known (drawn a few pixels wide, as every instant is)."""
    if not len(state):
        return state.assign(start_ns=pd.Series(dtype="float64"),
                            end_ns=pd.Series(dtype="float64"))
    ts = _num(state.ts_ns).astype("float64")
    nxt = ts.groupby(_text(state.engine)).transform(
        lambda t: t.sort_values().shift(-1).reindex(t.index))
    return state.assign(start_ns=ts, end_ns=nxt.fillna(ts))


def scrape_states(state: pd.DataFrame) -> pd.Series:
    """What each scrape says the engine was doing (``STATES``), the first that holds: it
    preempted since its previous scrape, requests waiting, requests running, neither (idle);
    ``unread`` where the scrape had neither gauge."""
    running, waiting = _num(state.running), _num(state.waiting)
    preempted = _num(state.preemptions_delta).fillna(0) > 0
    return pd.Series(np.select(
        [preempted.to_numpy(), (waiting > 0).to_numpy(), (running > 0).to_numpy(),
         (running.notna() | waiting.notna()).to_numpy()],
        ["preempting", "backlog", "serving", "idle"], "unread"), index=state.index, dtype=object)


def served_shards(shard_engines: pd.DataFrame) -> dict[str, list[int]]:
    """address -> the shards served there, in order (``shard_engines``)."""
    if not len(shard_engines):
        return {}
    rows = shard_engines.dropna(subset=["address", "shard_idx"])
    return {str(a): sorted({int(i) for i in g.shard_idx})
            for a, g in rows.groupby(rows.address.astype(str))}


def engine_lanes(state: pd.DataFrame, requests: pd.DataFrame,
                 shard_engines: pd.DataFrame) -> list[str]:
    """The engine lanes, top to bottom: the scraped engines in the order of the first shard each
    serves (those serving none after, by name), then the traced engines by name."""
    out: list[str] = []
    if len(state):
        shards = served_shards(shard_engines)
        engines = state[["engine", "address"]].drop_duplicates().astype(str)
        first = [min(shards.get(a, [10**9])) for a in engines.address]
        out += [e for _, e in sorted(zip(first, engines.engine))]
    if len(requests):
        out += sorted(set(request_lane_labels(requests)))
    return list(dict.fromkeys(out))


def state_bar_texts(state: pd.DataFrame, shard_engines: pd.DataFrame) -> dict[str, object]:
    """The bar texts (``timeline_plot.bar_texts``' fields) of the scrapes of ``engine_state``."""
    what = scrape_states(state)
    shards = served_shards(shard_engines)
    serves = pd.Series([", ".join(f"shard {i}" for i in shards.get(str(a), [])) or "no shard"
                        for a in state.address], index=state.index, dtype=object)
    detail = ("running " + _fmt(state.running, "{:,.0f}") + ", waiting "
              + _fmt(state.waiting, "{:,.0f}") + ", KV cache "
              + _fmt(_num(state.kv_cache_usage) * 100, "{:.0f}%") + ", preempted "
              + _fmt(state.preemptions_delta, "{:,.0f}") + "; serves " + serves)
    return dict(lane=_text(state.engine), color=what.map(style.ENGINE_STATE_COLORS),
                what="engine " + what, detail=detail, span="vLLM /metrics scrape",
                span_id="scrape:" + _text(state.engine) + "@" + _fmt(state.ts_ns, "{:.0f}"))


def request_bar_texts(requests: pd.DataFrame) -> dict[str, object]:
    """The bar texts of ``engine_requests``' rows: one bar per request the engine served."""
    queue, dur = _num(requests.queue_s), _num(requests.duration_s)
    queued = (queue >= QUEUED_SHARE * dur) & (dur > 0)
    detail = ("queued " + _fmt(queue, "{:,.3f} s") + ", first token "
              + _fmt(requests.ttft_s, "{:,.3f} s") + ", tokens "
              + _fmt(requests.prompt_tokens, "{:,.0f}") + " → "
              + _fmt(requests.completion_tokens, "{:,.0f}"))
    finish = _text(requests.finish_reason)
    detail = detail.where(finish == "", detail + ", " + finish)
    return dict(lane=request_lane_labels(requests),
                color=pd.Series(style.ENGINE_REQUEST, index=requests.index).where(
                    ~queued, style.ENGINE_QUEUED),
                what="request " + _text(requests.request_id).replace("", "(no id)"),
                detail=detail, span=SpanName.VLLM_REQUEST, span_id=_text(requests.span_id))


def key_entries(state: pd.DataFrame, requests: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(label, symbol, colour) for the engine bars drawn."""
    out = []
    if len(state):
        seen = set(scrape_states(state))
        out += [(f"engine {s}", "■", style.ENGINE_STATE_COLORS[s]) for s in STATES if s in seen]
    if len(requests):
        out.append(("engine request", "■", style.ENGINE_REQUEST))
        out.append(("request mostly queued", "■", style.ENGINE_QUEUED))
    return out
