"""The dashboard app: one factory for every mode, and a server that binds loopback.

- read-only over a finished run: ``rolloutscope dashboard RUN.duckdb`` (``serve_dashboard``);
- live over a running collector: ``rolloutscope dashboard URL`` (``serve_dashboard`` over a
  ``store.remote.RemoteRunStore``), the process ``rolloutscope serve`` starts beside itself;
  each browser session gets its own ``DataStore`` refreshed by a periodic callback, with a
  pause toggle. ``start_dashboard`` serves from a background thread of the calling process
  and returns a handle to stop (tests, benchmarks);

A served dashboard's sessions share one ``SharedReads`` (``dashboard.shared``): the frames
read and what is derived from them are held once per server, a session holds its selections.
A page request that the server cannot take now (too many sessions, memory near its bound, a
queue of sessions being built) gets a short "busy" page asking to reload, not a session; a
read that does not finish within the read time limit ends the build with its message on the
page and in the log.
- inline in Jupyter: ``build_app(store, live=False)`` (or any single view) in a cell after
  ``pn.extension("tabulator")``.
"""

from __future__ import annotations

import html
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import panel as pn
import param

from rolloutscope.store import RunStore
from rolloutscope.dashboard.auth import TokenAuthProvider
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.deeplink import follow_link
from rolloutscope.dashboard.defaults import DEFAULT_ADDRESS, DEFAULT_PORT
from rolloutscope.dashboard.in_flight import InFlight
from rolloutscope.dashboard.incident_view import IncidentDetail
from rolloutscope.dashboard.time_views import Fleet, Timeline
from rolloutscope.dashboard.tabs import CSS, Checkpoints, Overview, Rollouts
from rolloutscope.dashboard.trace_view import Traces
from rolloutscope.dashboard.replay_view import Replay
from rolloutscope.dashboard.diff_view import Diff
from rolloutscope.dashboard.steps_view import Steps
from rolloutscope.dashboard.shared import DashboardLimits, ReadTimeout, SharedReads

log = logging.getLogger(__name__)

REFRESH_MS = 1500  # live refresh period: inside the 1-2 s the views promise
# a session makes a tab's view when the tab is first shown (``LazyView``; off: every view at
# once, as before, bench_sessions.py's baseline)
LAZY_TABS = True
TAB_NAMES = ("Overview", "Timeline", "Checkpoints", "Fleet", "Rollouts", "In flight", "Traces",
             "Incident", "Steps", "Replay", "Diff")


@dataclass
class Dashboard:
    """The views of one session over one DataStore (what ``build_app`` lays out)."""

    data: DataStore
    overview: Overview
    timeline: Timeline
    checkpoints: Checkpoints
    fleet: Fleet
    rollouts: Rollouts
    in_flight: InFlight
    traces: Traces
    incident: IncidentDetail

    steps: Steps

    replay: Replay | None = None
    diff: Diff | None = None

    @classmethod
    def over(cls, data: DataStore, *, compare: RunStore | None = None) -> Dashboard:
        """``compare``: another store whose runs the Replay and Diff tabs offer."""
        return cls(data, Overview(data), Timeline(data), Checkpoints(data), Fleet(data),
                   Rollouts(data), InFlight(data, shown=False), Traces(data, shown=False),
                   IncidentDetail(data), Steps(data),
                   Replay(data, after_store=compare), Diff(data, other_store=compare))

    def views(self) -> list:
        """The views in tab order (``TAB_NAMES``)."""
        out = [self.overview, self.timeline, self.checkpoints, self.fleet, self.rollouts,
               self.in_flight, self.traces, self.incident, self.steps]
        return out + [v for v in (self.replay, self.diff) if v is not None]


class LazyView(pn.viewable.Viewer):
    """A tab's view, made the first time its tab is shown (or ``view`` is asked for).

    A session pays for the tabs it opens: a page that shows only the Overview never builds
    the Rollouts tab's table of every try nor the Timeline's lanes. The view is made, and
    shown, before the tabs build the models of its tab (``ViewTabs``), as an eager one is."""

    shown = param.Boolean(default=False)

    def __init__(self, make: Callable[[], object], **params) -> None:
        self._make = make
        self._view = None
        self._holder = pn.Column(sizing_mode="stretch_width")
        super().__init__(**params)
        self.param.watch(self._on_shown, "shown")

    @property
    def built(self) -> bool:
        return self._view is not None

    @property
    def view(self):
        if self._view is None:
            view = self._make()
            view.shown = self.shown
            self._view = view
            self._holder[:] = [view]
        return self._view

    def _on_shown(self, event) -> None:
        if event.new:
            self.view.shown = True
        elif self._view is not None:
            self._view.shown = False

    def __panel__(self):
        return self._holder


class LazyDashboard:
    """``Dashboard``'s views made on first use (``LazyView``): what ``build_app`` serves.
    Asking for a view (``dash.timeline``, ``views()``) makes it."""

    NAMES = ("overview", "timeline", "checkpoints", "fleet", "rollouts", "in_flight", "traces",
             "incident", "steps", "replay", "diff")

    def __init__(self, data: DataStore, *, compare: RunStore | None = None) -> None:
        self.data = data
        makers = {
            "overview": lambda: Overview(data), "timeline": lambda: Timeline(data),
            "checkpoints": lambda: Checkpoints(data), "fleet": lambda: Fleet(data),
            "rollouts": lambda: Rollouts(data), "in_flight": lambda: InFlight(data, shown=False),
            "traces": lambda: Traces(data, shown=False),
            "incident": lambda: IncidentDetail(data),
            "replay": lambda: Replay(data, after_store=compare),
            "diff": lambda: Diff(data, other_store=compare), "steps": lambda: Steps(data)}
        self.lazy = [LazyView(makers[name], name=name) for name in self.NAMES]

    def __getattr__(self, name: str):
        if name in LazyDashboard.NAMES:
            return self.lazy[LazyDashboard.NAMES.index(name)].view
        raise AttributeError(name)

    def views(self) -> list:
        """The views in tab order (``TAB_NAMES``), every one made."""
        return [lazy.view for lazy in self.lazy]


def _status_bar(data: DataStore) -> pn.Row:
    def title_text(*_) -> str:
        run = (f"run {html.escape(str(data.run_id))}" if data.run_id is not None else
               "waiting for the first span" if data.live else "no run in this store")
        return (f"<b style='font-size:15px'>rolloutscope</b> <span class='rs-note'>{run}"
                f"</span>")

    title = pn.pane.HTML(title_text(), stylesheets=[CSS])
    data.param.watch(lambda *_: setattr(title, "object", title_text()), "run_id")
    items: list = [title, pn.HSpacer()]
    if len(data.param.run_id.objects) > 1 or data.live:
        # no label above it: the bar stays one line high and never covers the tabs
        picker = pn.widgets.Select.from_param(data.param.run_id, name="", width=360,
                                              visible=len(data.param.run_id.objects) > 1,
                                              margin=(6, 10))
        # a live collector's second run shows the picker
        data.param.watch(lambda e: setattr(picker, "visible", len(e.new) > 1),
                         "run_id", what="objects")
        items.insert(1, picker)
    shown = pn.pane.HTML(stylesheets=[CSS], margin=(12, 6))
    whole = pn.widgets.Button(label="Whole run", width=100, margin=(6, 10),
                              description="show the whole run on every time plot")

    def show_range(*_):
        rng = data.time_range
        shown.object = ("<span class='rs-note'>every plot: the whole run</span>" if rng is None
                        else f"<span class='rs-note'>every plot: {rng[0]:,.1f} s to "
                             f"{rng[1]:,.1f} s</span>")

    def reset(*_):
        data.incident = None
        data.show_range(data.whole_run())

    whole.on_click(reset)
    data.param.watch(show_range, "time_range")
    show_range()
    items += [shown, whole]
    if data.live:
        pause = pn.widgets.Toggle.from_param(data.param.paused, label="Pause refresh", width=130,
                                             margin=(6, 10))
        timing = pn.pane.HTML(stylesheets=[CSS], margin=(12, 6))

        def show_timing(*_):
            timing.object = (f"<span class='rs-note'>live, every {REFRESH_MS / 1000:g} s; "
                             f"last refresh {data.last_refresh_ms:,.0f} ms</span>")

        data.param.watch(show_timing, "last_refresh_ms")
        show_timing()
        items += [timing, pause]
    return pn.Row(*items, sizing_mode="stretch_width", height=44)


class ViewTabs(pn.Tabs):
    """Dynamic tabs over views: only the view on screen is ``shown`` (follows live ticks); the
    others catch up when they are next shown.

    A view is shown *before* the tabs build the models of its tab, so its tables are built
    holding the rows it catches up to. Shown after, the catch-up would reach each table as a
    data change while the browser is still building it, and Panel's Tabulator drops such a
    change (``setData`` returns early until the table is built): on a slow or busy browser the
    table would stay empty, though the server holds its rows."""

    def __init__(self, *tabs, views, **params) -> None:
        self._views = list(views)
        super().__init__(*tabs, **params)
        self.show_active()
        # a no-op while Panel calls _update_active (below) first; a Panel that stopped calling
        # it would still show the active view, only after building its tab
        self.param.watch(lambda *_: self.show_active(), "active")

    def show_active(self) -> None:
        for i, view in enumerate(self._views):
            view.shown = i == self.active

    def _update_active(self, *events) -> None:  # Panel's watcher that builds the active tab
        if any(e.name == "active" for e in events):
            self.show_active()
        super()._update_active(*events)


def build_app(store: RunStore, *, live: bool, run_id: str | None = None,
              refresh_ms: int = REFRESH_MS, waiting_for: str | None = None,
              link: dict | None = None, compare: RunStore | None = None,
              shared: SharedReads | None = None) -> pn.Column:
    """The whole dashboard over ``store`` for one session (a served page or a notebook cell).
    ``waiting_for`` names where a live collector listens, for the page before its first span;
    ``link``: query parameters to open on (``deeplink``; a served page reads its URL's);
    ``shared``: the server's shared reads (None: this session reads for itself)."""
    data = DataStore(store, run_id=run_id, live=live, waiting_for=waiting_for, shared=shared)
    if LAZY_TABS:
        dash = LazyDashboard(data, compare=compare)
        views = dash.lazy
    else:
        dash = Dashboard.over(data, compare=compare)
        views = dash.views()
    tabs = ViewTabs(*zip(TAB_NAMES, views), views=views, dynamic=True,
                    sizing_mode="stretch_width")

    def follow_selection(event):  # picking an incident in the list opens it on the timeline
        if event.new and tabs.active == 0:
            tabs.active = 1

    data.param.watch(follow_selection, "incident")
    traces_tab = TAB_NAMES.index("Traces")

    def follow_trace(event):  # picking a rollout elsewhere opens its trace
        if event.new and tabs.active != traces_tab:
            tabs.active = traces_tab

    data.param.watch(follow_trace, "trace_id")
    app = pn.Column(_status_bar(data), tabs, sizing_mode="stretch_width")
    app.dashboard = dash  # for notebooks and tests: the views and their DataStore
    served = pn.state.curdoc is not None and pn.state.curdoc.session_context is not None
    app.link = follow_link(data, tabs, TAB_NAMES[:len(views)], link if link is not None else
                           (pn.state.session_args if served else None),
                           location=pn.state.location if served else None)
    if live:
        cb = pn.state.add_periodic_callback(data.tick, period=refresh_ms)
        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            pn.state.on_session_destroyed(lambda ctx: cb.stop())
    return app


def free_port(address: str = DEFAULT_ADDRESS) -> int:
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def websocket_origins(address: str, port: int) -> list[str]:
    """The origins a browser sends for this server (loopback has two spellings)."""
    host = f"[{address}]" if ":" in address else address
    origins = {f"{host}:{port}"}
    if address in ("127.0.0.1", "::1", "localhost"):
        origins |= {f"localhost:{port}", f"127.0.0.1:{port}"}
    return sorted(origins)


@dataclass
class DashboardServer:
    """A dashboard served from a thread; ``stop()`` ends it."""

    url: str
    port: int
    address: str
    _thread: threading.Thread
    shared: SharedReads | None = None  # what its sessions share (tests read its counts)

    def stop(self) -> None:
        self._thread.stop()
        self._thread.join(timeout=10)


class DashboardPortInUse(OSError):
    """The dashboard's port is taken by another process."""


def _require_free(address: str, port: int) -> None:
    """Fail before serving, rather than report the URL of whatever else listens there."""
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
        try:
            s.bind((address, port))
        except OSError as exc:
            raise DashboardPortInUse(
                f"port {port} on {address} is in use ({exc.strerror}); pass --port 0 to pick a "
                f"free one, or another port") from None


def _wait_listening(address: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            threading.Event().wait(0.05)


def start_dashboard(store: RunStore, *, port: int = 0, address: str = DEFAULT_ADDRESS,
                    live: bool, run_id: str | None = None, show: bool = False,
                    refresh_ms: int = REFRESH_MS, ready_timeout_s: float = 30.0,
                    waiting_for: str | None = None,
                    token: str | None = None,
                    limits: DashboardLimits | None = None,
                    compare: RunStore | None = None) -> DashboardServer:
    """Serve the dashboard from a background thread and return once it accepts connections.

    For the collector process (live) and for tests; ``port=0`` picks a free port. With
    ``token``, every page and websocket needs it (``dashboard.auth``). ``limits``: the
    server's bounds (default: from the environment, ``DashboardLimits.from_env``).
    """
    if port:
        _require_free(address, port)
    port = port or free_port(address)
    extra = {"auth_provider": TokenAuthProvider(token)} if token else {}
    shared = SharedReads(limits or DashboardLimits.from_env())
    thread = pn.serve(_factory(store, live=live, run_id=run_id, refresh_ms=refresh_ms,
                               waiting_for=waiting_for, shared=shared, compare=compare),
                      port=port, address=address, show=show, threaded=True,
                      allow_websocket_origin=websocket_origins(address, port),
                      title="rolloutscope", verbose=False, **extra)
    _wait_listening(address, port, ready_timeout_s)
    host = f"[{address}]" if ":" in address else address
    return DashboardServer(url=f"http://{host}:{port}/", port=port, address=address,
                           _thread=thread, shared=shared)


def serve_dashboard(store: RunStore, *, port: int = DEFAULT_PORT,
                    address: str = DEFAULT_ADDRESS, live: bool, show: bool = False,
                    run_id: str | None = None,
                    on_ready: Callable[[str], None] | None = None,
                    compare: RunStore | None = None,
                    limits: DashboardLimits | None = None, token: str | None = None,
                    waiting_for: str | None = None) -> None:
    """Serve the dashboard in this thread until interrupted (the CLI's foreground mode).
    The server's DuckDB memory limit is set within ``limits`` (the store is this server's
    own). With ``token``, every page and websocket needs it (``dashboard.auth``)."""
    if port:
        _require_free(address, port)
    port = port or free_port(address)
    shared = SharedReads(limits or DashboardLimits.from_env())
    for s in (store, compare):
        if s is not None:
            shared.limit_duckdb(s)
    extra = {"auth_provider": TokenAuthProvider(token)} if token else {}
    server = pn.serve(_factory(store, live=live, run_id=run_id, refresh_ms=REFRESH_MS,
                               compare=compare, shared=shared, waiting_for=waiting_for),
                      port=port, address=address, show=False, start=False,
                      allow_websocket_origin=websocket_origins(address, port),
                      title="rolloutscope", verbose=False, **extra)
    host = f"[{address}]" if ":" in address else address
    url = f"http://{host}:{port}/"
    if on_ready is not None:
        on_ready(url)
    if show:
        server.io_loop.add_callback(server.show, "/")
    server.start()
    try:
        server.io_loop.start()
    finally:
        server.stop()


def _factory(store: RunStore, *, live: bool, run_id: str | None, refresh_ms: int,
             waiting_for: str | None = None, compare: RunStore | None = None,
             shared: SharedReads | None = None):
    shared = shared or SharedReads()

    def app():
        _quiet_closed_sockets()
        # Tabulator's script in every page: Panel loads it only for a table in the first
        # render, so a link that opens on a tab without one (Timeline) left every later table
        # undrawn ("Tabulator is not defined")
        pn.extension("tabulator")
        admission = shared.admission
        why = admission.refusal(_waited_s())
        if why is None and not admission.enter():
            why = (f"{shared.limits.max_builds} sessions are being built and none finished "
                   f"within {shared.limits.build_wait_s:g} s")
        if why is not None:
            admission.refused += 1
            log.warning("dashboard busy, a page got the busy page: %s", why)
            return busy_page(why)
        served = pn.state.curdoc is not None and pn.state.curdoc.session_context is not None
        if served:
            pn.state.on_session_destroyed(lambda ctx: admission.leave())
        try:
            return build_app(store, live=live, run_id=run_id, refresh_ms=refresh_ms,
                             waiting_for=waiting_for, compare=compare, shared=shared)
        except ReadTimeout as exc:
            log.error("dashboard session not built: %s", exc)
            return read_failed_page(str(exc))
        finally:
            admission.built()
            if not served:
                admission.leave()
    return app


def _waited_s() -> float:
    """How long this page's request has waited for its session (Tornado's request time)."""
    try:
        request = pn.state.curdoc.session_context.request
        return float(request.request_time())
    except Exception:  # noqa: BLE001 - outside a served request: it did not wait
        return 0.0



def busy_page(why: str) -> pn.Column:
    """The page a request gets when the server takes no new session now, saying why (what a
    reload storm meets instead of memory). It holds one pane: it costs the server almost
    nothing."""
    return pn.Column(pn.pane.HTML(
        f"<div id='rs-busy' class='rs-busy'><h3>rolloutscope: the dashboard is busy</h3>"
        f"<p>{html.escape(why)}.</p><p>Reload this page in a few seconds.</p></div>",
        stylesheets=[CSS]), sizing_mode="stretch_width")


def read_failed_page(message: str) -> pn.Column:
    """The page of a session whose build stopped on a read that did not finish."""
    return pn.Column(pn.pane.HTML(
        f"<div id='rs-read-failed' class='rs-error'><h3>rolloutscope: the run could not be "
        f"read in time</h3><p>{html.escape(message)}.</p><p>Reload to try again, or raise "
        f"the limit.</p></div>", stylesheets=[CSS]), sizing_mode="stretch_width")


_CLOSED = ("WebSocketClosedError", "StreamClosedError")


def _quiet_closed_sockets() -> None:
    """A browser that leaves while a live tick's update is on its way is not an error: Bokeh's
    server writes to the socket from a task nobody awaits, and asyncio would log the closed
    socket as a traceback. Everything else still reaches the loop's usual handler."""
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    if getattr(loop, "_rolloutscope_quiet", False):
        return
    previous = loop.get_exception_handler()

    def handler(loop, context):
        exc = context.get("exception")
        if exc is not None and type(exc).__name__ in _CLOSED:
            log.debug("a dashboard session closed during an update: %s", exc)
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    loop._rolloutscope_quiet = True
