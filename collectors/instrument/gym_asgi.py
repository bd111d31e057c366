"""ASGI middleware that observes a Gym server's checkpoint traffic
(docs/domain/checkpoint-protocol.md, docs/domain/telemetry.md).

Pure ASGI, no Starlette import: ``app.add_middleware(GymCheckpointMiddleware, tracer=...)`` on
a FastAPI/Starlette app, or ``GymCheckpointMiddleware(app, ...)`` around any ASGI app.

What it emits (route meanings in ``checkpoint_routes``):

- a ``gym.checkpoint.<op>`` span per control operation of either protocol generation, from
  request arrival to the last response byte, with the checkpoint id, participant kind and
  instance, op, outcome, error code, and whatever the reply carries (phase, readiness,
  blockers, report counters); an open marker once it has run ``OPEN_MARKER_AFTER_S`` past its
  request body, so a prepare that waits minutes is visible while it waits; a ``gym.checkpoint.refused`` event when the
  reply is a protocol error;
- a ``gym.checkpoint.status`` span per status poll, a ``gym.checkpoint.acknowledge`` span per
  completion ACK (with a ``gym.agent.acknowledged`` event per receipt it accepted);
- on the rollout data plane (``/ng-rollout/{id}/...``), only refusals: a request answered
  with a protocol code (``admission_closed``/``checkpoint_parked``, ``stale_attempt``, ...) is a
  ``gym.checkpoint.refused_request`` span carrying a ``gym.checkpoint.refused`` event.

The rules, in order of importance:

1. Never alter a request or a response. Every ASGI message is passed on as received, the same
   object, before the next one is awaited; nothing is buffered, so a streaming response's first
   byte leaves when the app sends it. Only copies are kept (a whole body sent as one ``bytes``
   is kept as that object: nothing can change it).
2. Never raise into the server. Everything the middleware does of its own is guarded and
   counted (``failures``); exceptions of the app or of the server's ``receive``/``send``
   propagate unchanged.
3. Read bounded copies of JSON bodies only: at most ``max_body_bytes`` per body, and only
   bodies that say they are JSON. A bigger body, or one that does not parse, is ignored.
4. Cost nothing elsewhere: a path outside ``/ng-control/`` and ``/ng-rollout/`` costs one
   prefix test; a data-plane request costs a wrapped ``send`` that looks at the status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

import orjson
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, StatusCode, Tracer

from rolloutscope.collectors.instrument.checkpoint_routes import (
    ACKNOWLEDGE_OP,
    CONTROL_PREFIX,
    CONTROL_ROUTES,
    PROTOCOL_CODES,
    ROLLOUT_PREFIX,
    ControlRoute,
    acknowledged_receipts,
    control_route,
    protocol_error,
    reply_attributes,
    request_attributes,
    rollout_attributes,
)
from rolloutscope.collectors.instrument.markers import OPEN_MARKER_AFTER_S, emit_open_marker
from rolloutscope.collectors.instrument.guard import InstrumentFailures
from rolloutscope.vocabulary import (
    Attr,
    EventName,
    OpOutcome,
    ParticipantKind,
    SpanName,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TRACER_NAME = "rolloutscope.instrument.gym"
# Protocol bodies are small (a status reply lists at most 100 blockers; an ACK at most 4,096
# receipts of ~200 bytes). Anything larger is not worth holding a copy of.
DEFAULT_MAX_BODY_BYTES = 1 << 20
_SHARED_PREFIX = "/ng-"  # the one test every request pays
_TRACE_HEADERS = frozenset((b"traceparent", b"tracestate"))
_CONTROL_ROUTE = CONTROL_ROUTES.get  # a path as routed; control_route also takes a trailing /



ACK_EVENTS_PER_SPAN = 128  # the OTel SDK default OTEL_SPAN_EVENT_COUNT_LIMIT
_OK, _ERROR = OpOutcome.OK.value, OpOutcome.ERROR.value  # an enum's .value is a descriptor call

class _Body:
    """A bounded copy of one body that did not come as one ``bytes`` message (``_kept``); gives
    up (and frees the copy) past the cap."""

    __slots__ = ("limit", "data", "complete", "given_up")

    def __init__(self, limit: int, whole: bytes | None = None) -> None:
        self.limit = limit
        # a body already kept whole, then followed by more (which the protocol does not do)
        self.data: bytes | bytearray = bytearray() if whole is None else whole
        self.complete = whole is not None
        self.given_up = False

    def add(self, chunk: bytes, more: bool) -> None:
        if self.given_up:
            return
        if len(self.data) + len(chunk) > self.limit:
            self.given_up = True
            self.data = bytearray()
            return
        if not more and not self.data and type(chunk) is bytes:
            self.data = chunk  # a whole body in one message: bytes do not change, no copy
        else:
            self.data += chunk
        self.complete = not more

    def json(self) -> Any:
        if self.given_up or not self.complete or not self.data:
            return None
        try:
            return orjson.loads(self.data)
        except orjson.JSONDecodeError:
            return None


# What is kept of a body: nothing yet (None), the whole body as the one ``bytes`` object it came
# in (nearly every body: no copy, and nothing to change it), or a ``_Body``.
_Kept = bytes | _Body | None


def _kept(kept: _Kept, chunk: Any, more: bool, limit: int) -> bytes | _Body:
    """What is kept of a body once ``chunk`` is added to ``kept``."""
    if kept is None and not more and type(chunk) is bytes and len(chunk) <= limit:
        return chunk
    if type(kept) is not _Body:
        kept = _Body(limit, kept)
    kept.add(chunk, more)
    return kept


def _json(kept: _Kept) -> Any:
    """The JSON value of a body kept complete and within the cap, else None."""
    if type(kept) is bytes:
        if not kept:
            return None
        try:
            return orjson.loads(kept)
        except orjson.JSONDecodeError:
            return None
    return None if kept is None else kept.json()


def _is_json(headers: Any, limit: int) -> bool:
    """A response worth copying: JSON, and not announced bigger than the cap."""
    json_type = False
    for name, value in headers:
        # only the two names' lengths can match: any other header costs one length test, and
        # a name sent lowercase (as ASGI asks) one comparison
        size = len(name)
        if size == 12 and (name == b"content-type" or name.lower() == b"content-type"):
            # find, not ``in``: ``b"json" in value`` first tries b"json" as an integer, and
            # builds and discards a TypeError every time
            json_type = value.find(b"json") >= 0 or value.lower().find(b"json") >= 0
        elif size == 14 and (name == b"content-length" or name.lower() == b"content-length"):
            try:
                if int(value) > limit:
                    return False
            except ValueError:
                return False
    return json_type


class _Exchange:
    """One observed request/response: status, bounded body copies, when it ended."""

    __slots__ = ("request", "response", "copy_response", "status", "end_ns", "marker",
                 "recorded", "parent", "span")

    def __init__(self) -> None:
        self.request: _Kept = None  # kept by control routes only
        self.response: _Kept = None
        self.copy_response = False  # whether the response body is worth keeping
        self.status: int | None = None
        self.end_ns = 0
        # (route, method, start) of an operation to show open if it is still running
        # OPEN_MARKER_AFTER_S after its request body is in
        self.marker: tuple[ControlRoute, str, int] | None = None
        self.recorded = False
        self.parent: Context | None = None  # the span's parent, read when the request arrived
        self.span: Span | None = None  # made once the operation ends, or is shown open


class _OpenMarkers:
    """When running control operations are shown open, on one event loop.

    Every operation is due the same delay after its request body, so the earliest due is that
    of the oldest operation still running: one loop timer, armed for it, serves them all. An
    operation leaves the table when it ends (nearly all end long before they are due), which
    costs less than arming and cancelling a timer for each request, and holds nothing of an
    operation that has ended.
    """

    __slots__ = ("loop", "_delay", "_show", "_running", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float,
                 show: Callable[..., None]) -> None:
        self.loop = loop
        self._delay = delay
        self._show = show
        self._running: dict[_Exchange, tuple[float, tuple[Any, ...]]] = {}  # arrival order
        self._timer: asyncio.TimerHandle | None = None

    def add(self, exchange: _Exchange, operation: tuple[Any, ...]) -> None:
        """``show(exchange, *operation)`` once due, unless ``discard``ed first."""
        when = self.loop.time() + self._delay
        self._running[exchange] = (when, operation)
        if self._timer is None:
            self._timer = self.loop.call_at(when, self._fire)

    def discard(self, exchange: _Exchange) -> None:
        self._running.pop(exchange, None)

    def _fire(self) -> None:
        self._timer = None
        now = self.loop.time()
        for exchange, (when, operation) in list(self._running.items()):
            if when > now:  # the rest arrived later still
                self._timer = self.loop.call_at(when, self._fire)
                return
            del self._running[exchange]
            self._show(exchange, *operation)


class GymCheckpointMiddleware:
    """Observes checkpoint control routes and data-plane refusals; see the module rules."""

    def __init__(self, app: ASGIApp, *, tracer: Tracer | None = None,
                 participant_kind: ParticipantKind | str | None = None,
                 instance: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 open_marker_after_s: float = OPEN_MARKER_AFTER_S,
                 time_ns: Callable[[], int] = time.time_ns) -> None:
        self.app = app
        self._tracer = tracer if tracer is not None else trace.get_tracer(TRACER_NAME)
        self._kind = str(participant_kind) if participant_kind is not None else None
        self._instance = instance
        self._learned: dict[str, Any] = {}  # kind/instance a reply told us about this server
        self._limit = max_body_bytes
        self._open_after_s = open_marker_after_s
        self._markers: _OpenMarkers | None = None
        self._time_ns = time_ns
        self.failures = InstrumentFailures("Gym checkpoint middleware")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith(_SHARED_PREFIX):
            if path.startswith(CONTROL_PREFIX):
                route = _CONTROL_ROUTE(path)
                if route is None and path.endswith("/"):
                    route = control_route(path)
                if route is not None:
                    return await self._control(route, scope, receive, send)
            elif path.startswith(ROLLOUT_PREFIX):
                return await self._data_plane(path, scope, receive, send)
        return await self.app(scope, receive, send)

    # -- control routes -------------------------------------------------------------------------

    async def _control(self, route: ControlRoute, scope: Scope, receive: Receive,
                       send: Send) -> None:
        start = self._time_ns()
        exchange = _Exchange()
        limit = self._limit
        # The span is made when the operation ends (or once it has run long enough to be shown
        # open), from the start time and parent read now: one pass of the SDK over its
        # attributes instead of two, and no SDK work before the app sees the request.
        try:
            exchange.parent = self._parent(scope)
        except Exception as exc:  # noqa: BLE001 - never raise into the server
            self.failures.record(exc)
            exchange.recorded = True  # nothing to record it under
        if route.is_operation and not exchange.recorded:
            exchange.marker = (route, scope.get("method", ""), start)

        async def observed_receive() -> Message:
            message = await receive()
            try:
                if message.get("type") == "http.request":
                    more = message.get("more_body", False)
                    exchange.request = _kept(exchange.request, message.get("body", b""), more,
                                             limit)
                    if not more and exchange.marker is not None:
                        self._schedule_marker(exchange)
            except Exception as exc:  # noqa: BLE001 - never raise into the server
                self.failures.record(exc)
            return message

        async def observed_send(message: Message) -> None:
            try:
                kind = message.get("type")
                if kind == "http.response.body":
                    more = message.get("more_body", False)
                    if exchange.copy_response:
                        exchange.response = _kept(exchange.response, message.get("body", b""),
                                                  more, limit)
                    if not more:
                        exchange.end_ns = self._time_ns()
                        if exchange.end_ns:
                            # recorded before the last chunk leaves: a caller holding the whole
                            # reply knows its span has ended (and the first byte was never
                            # waited on)
                            self._end_control(route, scope, exchange, start, None)
                elif kind == "http.response.start":
                    exchange.status = message.get("status")
                    if _is_json(message.get("headers", ()), limit):
                        exchange.copy_response, exchange.response = True, None
            except Exception as exc:  # noqa: BLE001
                self.failures.record(exc)
            await send(message)

        raised: BaseException | None = None
        try:
            await self.app(scope, observed_receive, observed_send)
        except BaseException as exc:
            raised = exc
            raise
        finally:
            if not exchange.recorded:  # nearly always recorded as its last chunk left
                self._end_control(route, scope, exchange, start, raised)

    @staticmethod
    def _route_attributes(route: ControlRoute, method: str) -> dict[str, Any]:
        return {Attr.CK_OPERATION: route.op, Attr.HTTP_ROUTE: route.path,
                Attr.HTTP_METHOD: method}

    def _add_identity(self, attrs: dict[str, Any], route: ControlRoute) -> None:
        """The participant kind and instance into ``attrs``: the route's kind (first
        generation) wins, then the configured one, then what a reply said."""
        kind = (route.kind_value if route.kind_value is not None
                else self._kind or self._learned.get(Attr.CK_PARTICIPANT_KIND))
        if kind is not None:
            attrs[Attr.CK_PARTICIPANT_KIND] = kind
        instance = self._instance or self._learned.get(Attr.CK_INSTANCE)
        if instance is not None:
            attrs[Attr.CK_INSTANCE] = instance

    @staticmethod
    def _parent(scope: Scope) -> Context:
        """The current span (an outer OTel server middleware's), else the caller's
        ``traceparent``: control calls carry the coordinator's trace context."""
        current = otel_context.get_current()
        # an empty context (no outer OTel middleware, the usual case) holds no span
        if current and trace.get_current_span(current).get_span_context().is_valid:
            return current
        carrier: dict[str, str] | None = None
        for name, value in scope.get("headers", ()):
            if name in _TRACE_HEADERS:
                if carrier is None:
                    carrier = {}
                carrier[name.decode("latin-1")] = value.decode("latin-1")
        return propagate.extract(carrier) if carrier else current

    def _schedule_marker(self, exchange: _Exchange) -> None:
        """The request body is in: if the operation is still running OPEN_MARKER_AFTER_S from
        now (a prepare waiting for readiness), show it in the live views."""
        operation, exchange.marker = exchange.marker, None
        loop = asyncio.get_running_loop()
        markers = self._markers
        if markers is None or markers.loop is not loop:
            # one queue per loop; one made for another loop keeps serving what it holds
            markers = self._markers = _OpenMarkers(loop, self._open_after_s, self._mark_open)
        markers.add(exchange, operation)

    def _mark_open(self, exchange: _Exchange, route: ControlRoute, method: str,
                   start: int) -> None:
        if exchange.recorded:  # ended, though queued on another loop's table
            return
        try:
            body = _json(exchange.request)
            attrs = self._route_attributes(route, method)
            self._add_identity(attrs, route)
            attrs.update(request_attributes(body))
            exchange.span = self._tracer.start_span(route.span_name, context=exchange.parent,
                                                    attributes=attrs, start_time=start)
            if exchange.span.is_recording():  # sampled out, or no SDK: nothing to show
                emit_open_marker(self._tracer, exchange.span)
        except Exception as exc:  # noqa: BLE001
            self.failures.record(exc)
            if exchange.span is None:
                exchange.recorded = True  # the SDK refused the span; the end would try again

    def _end_control(self, route: ControlRoute, scope: Scope, exchange: _Exchange, start: int,
                     raised: BaseException | None) -> None:
        if exchange.recorded:
            return
        exchange.recorded = True
        markers = self._markers
        if markers is not None:
            markers.discard(exchange)
        try:
            request = _json(exchange.request)
            reply = _json(exchange.response)
            parent = exchange.parent
            attrs = request_attributes(request)
            if Attr.CHECKPOINT_ID not in attrs:  # first generation's GET status?checkpoint_id=
                query_string = scope.get("query_string", b"")
                query = parse_qs(query_string.decode("latin-1")) if query_string else {}
                if query.get("checkpoint_id"):
                    attrs[Attr.CHECKPOINT_ID] = query["checkpoint_id"][0][:256]
            learned = reply_attributes(reply)
            if learned:
                if Attr.CK_PARTICIPANT_KIND in learned or Attr.CK_INSTANCE in learned:
                    self._learn(learned)
                attrs.update(learned)
            self._add_identity(attrs, route)
            status = exchange.status
            ok = raised is None and status is not None and 200 <= status < 300
            attrs[Attr.CK_OUTCOME] = _OK if ok else _ERROR
            if status is not None:
                attrs[Attr.HTTP_STATUS] = status
            end = exchange.end_ns or self._time_ns()
            error = protocol_error(reply) if not ok else None
            if error is not None:
                attrs[Attr.CK_CODE] = error[0]
            elif raised is not None:
                attrs[Attr.ERROR_TYPE] = type(raised).__name__
            span = exchange.span
            if span is None:
                first = self._route_attributes(route, scope.get("method", ""))
                first.update(attrs)
                span = self._tracer.start_span(route.span_name, context=parent,
                                               attributes=first, start_time=start)
            else:  # shown open while it ran
                span.set_attributes(attrs)
            if error is not None:
                code, detail = error
                span.add_event(EventName.CK_REFUSED, _refusal(code, detail, {}), timestamp=end)
                span.set_status(StatusCode.ERROR, detail or code)
            elif raised is not None:
                span.set_status(StatusCode.ERROR, str(raised)[:512])
            elif not ok:
                span.set_status(StatusCode.ERROR, f"HTTP {status}")
            receipts = acknowledged_receipts(request) if ok and route.op == ACKNOWLEDGE_OP \
                else None
            if receipts:
                for receipt in receipts[:ACK_EVENTS_PER_SPAN]:
                    span.add_event(EventName.AGENT_ACKNOWLEDGED, receipt, timestamp=end)
            span.end(end_time=end)
            # the SDK keeps 128 events a span and drops the rest silently; a batch of up to
            # 4096 receipts continues on zero-length child spans of the same name
            if receipts and len(receipts) > ACK_EVENTS_PER_SPAN:
                ctx = trace.set_span_in_context(span)
                for at in range(ACK_EVENTS_PER_SPAN, len(receipts), ACK_EVENTS_PER_SPAN):
                    more = self._tracer.start_span(route.span_name, context=ctx,
                                                   attributes=attrs, start_time=end)
                    for receipt in receipts[at:at + ACK_EVENTS_PER_SPAN]:
                        more.add_event(EventName.AGENT_ACKNOWLEDGED, receipt, timestamp=end)
                    more.end(end_time=end)
        except Exception as exc:  # noqa: BLE001
            self.failures.record(exc)

    def _learn(self, reply: dict[str, Any]) -> None:
        for key in (Attr.CK_PARTICIPANT_KIND, Attr.CK_INSTANCE):
            if key in reply:
                self._learned[key] = reply[key]

    # -- the rollout data plane -----------------------------------------------------------------

    async def _data_plane(self, path: str, scope: Scope, receive: Receive, send: Send) -> None:
        start = self._time_ns()
        exchange = _Exchange()

        async def observed_send(message: Message) -> None:
            try:
                kind = message.get("type")
                if kind == "http.response.start":
                    status = exchange.status = message.get("status")
                    # only an error reply can be a refusal; a 2xx stream is never copied
                    if (isinstance(status, int) and status >= 400
                            and _is_json(message.get("headers", ()), self._limit)):
                        exchange.copy_response, exchange.response = True, None
                elif exchange.copy_response:
                    if kind == "http.response.body":
                        more = message.get("more_body", False)
                        exchange.response = _kept(exchange.response, message.get("body", b""),
                                                  more, self._limit)
                        if not more:
                            exchange.end_ns = self._time_ns()
                    if exchange.end_ns:  # recorded before the last chunk of the refusal leaves
                        self._refused_request(path, scope, exchange, start)
            except Exception as exc:  # noqa: BLE001 - never raise into the server
                self.failures.record(exc)
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            if exchange.copy_response and not exchange.recorded:
                self._refused_request(path, scope, exchange, start)

    def _refused_request(self, path: str, scope: Scope, exchange: _Exchange,
                         start: int) -> None:
        exchange.recorded = True
        try:
            error = protocol_error(_json(exchange.response))
            if error is None or error[0] not in PROTOCOL_CODES:
                return
            rollout = rollout_attributes(path)
            if rollout is None:
                return
            code, detail = error
            attrs = dict(rollout)
            attrs[Attr.HTTP_METHOD] = scope.get("method", "")
            attrs[Attr.HTTP_STATUS] = exchange.status
            attrs[Attr.CK_CODE] = code
            kind = self._kind or self._learned.get(Attr.CK_PARTICIPANT_KIND)
            if kind is not None:
                attrs[Attr.CK_PARTICIPANT_KIND] = kind
            instance = self._instance or self._learned.get(Attr.CK_INSTANCE)
            if instance is not None:
                attrs[Attr.CK_INSTANCE] = instance
            end = exchange.end_ns or self._time_ns()
            span = self._tracer.start_span(SpanName.CK_REFUSED_REQUEST, attributes=attrs,
                                           start_time=start)
            span.add_event(EventName.CK_REFUSED,
                           _refusal(code, detail, {Attr.CK_EPISODE: rollout[Attr.ROLLOUT_ID]}),
                           timestamp=end)
            span.set_status(StatusCode.ERROR, detail or code)
            span.end(end_time=end)
        except Exception as exc:  # noqa: BLE001
            self.failures.record(exc)


def _refusal(code: str, detail: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    attrs = {Attr.CK_CODE: code, **extra}
    if detail:
        attrs[Attr.CK_DETAIL] = detail
    return attrs
