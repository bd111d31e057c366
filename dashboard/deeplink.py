"""A link that reopens the dashboard where it is: the run, the tab, the incident and the time
range, as URL query parameters (``?run=R&tab=incident&incident=p3-acf0af4286&t0=780&t1=1250``),
for an incident channel.

Pure parsing and formatting (``LinkState``) plus ``follow_link``, which applies a session's query
parameters when its app is built and keeps the page's URL in step as the user navigates (tab,
run, incident, zoom), through Panel's ``pn.state.location``. Unknown or malformed values are
ignored: a stale link still opens the dashboard.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

PARAMS = ("run", "tab", "incident", "t0", "t1")


@dataclass(frozen=True)
class LinkState:
    run: str | None = None
    tab: str | None = None
    incident: str | None = None
    t0: float | None = None
    t1: float | None = None

    @property
    def time_range(self) -> tuple[float, float] | None:
        if self.t0 is None or self.t1 is None or not self.t1 > self.t0:
            return None
        return (self.t0, self.t1)

    def query(self) -> dict[str, str]:
        """Query parameters for this state (absent values left out)."""
        out = {"run": self.run, "tab": self.tab, "incident": self.incident,
               "t0": _num(self.t0), "t1": _num(self.t1)}
        return {k: v for k, v in out.items() if v}


def _num(v: float | None) -> str | None:
    return None if v is None else f"{v:.3f}".rstrip("0").rstrip(".")


def _text(v) -> str | None:
    if isinstance(v, (list, tuple)):
        v = v[0] if v else None
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if v is None:
        return None
    v = str(v).strip()
    return v or None


def _float(v) -> float | None:
    text = _text(v)
    try:
        f = float(text) if text is not None else None
    except ValueError:
        return None
    return f if f is not None and math.isfinite(f) else None


def parse_query(args: Mapping[str, object]) -> LinkState:
    """A session's query arguments (Bokeh's ``session_args``: name -> list of bytes, or plain
    strings) as a LinkState."""
    return LinkState(run=_text(args.get("run")), tab=_text(args.get("tab")),
                     incident=_text(args.get("incident")), t0=_float(args.get("t0")),
                     t1=_float(args.get("t1")))


def tab_index(name: str | None, tabs: Sequence[str]) -> int | None:
    """The index of a tab named (any case) in ``tabs``."""
    if not name:
        return None
    lowered = [t.lower() for t in tabs]
    return lowered.index(name.lower()) if name.lower() in lowered else None


def follow_link(data, tabs, names: Sequence[str], args: Mapping[str, object] | None,
                location=None) -> LinkState:
    """Apply ``args`` (the session's query arguments) to the DataStore and the tabs, then keep
    ``location`` (``pn.state.location``, when served) in step with them. Returns what it
    applied."""
    state = parse_query(args or {})
    if state.run and state.run in list(data.param.run_id.objects) and state.run != data.run_id:
        data.run_id = state.run
    inc = data.frames["incidents"]
    if state.incident and len(inc) and (inc.incident_id.astype(str) == state.incident).any():
        data.incident = state.incident
    if state.time_range is not None:
        data.show_range(state.time_range)
    index = tab_index(state.tab, names)
    if index is not None:
        tabs.active = index
    if location is not None:
        def push(*_):
            rng = data.time_range
            now = LinkState(run=data.run_id, tab=names[tabs.active].lower(),
                            incident=data.incident, t0=rng[0] if rng else None,
                            t1=rng[1] if rng else None)
            # other parameters stay; ours that no longer apply (no incident) leave the URL
            query = {k: v for k, v in location.query_params.items() if k not in PARAMS}
            query.update(now.query())
            search = "?" + urlencode(query) if query else ""
            if location.search != search:
                location.search = search

        data.param.watch(push, ["run_id", "incident", "time_range"])
        tabs.param.watch(push, "active")
        push()
    return state
