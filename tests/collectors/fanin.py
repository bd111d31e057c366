"""A fleet of OTLP/HTTP exporters, each holding one kept-alive connection, in one process.

``fleet`` opens ``connections`` connections to a collector, waits until every one is open (so
they are all held at once), then has each send ``requests`` span exports, one after another
over its own connection, as the stock exporters do over their pooled connection (HTTP/1.1,
protobuf, ``Content-Length``). Nothing is retried: a connection error (refused, reset, closed
by the collector, a short answer) or a status other than 200 is counted, with what it was.
Used by tests/collectors/test_fanin.py and benchmarks/bench_fanin.py; bounded (a deadline on
everything) and loopback only.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections import Counter
from dataclasses import dataclass, field

from rolloutscope.vocabulary import ResourceAttr
from tests.collectors.otlp_fixtures import span_request


@dataclass
class FleetResult:
    connections: int
    requests: int
    spans_sent: int = 0
    spans_acked: int = 0
    statuses: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)  # connection errors, by kind
    connected_s: float = 0.0  # until every connection was open
    sent_s: float = 0.0  # from then until every answer was in

    @property
    def ok(self) -> bool:
        return not self.errors and set(self.statuses) == {200} and \
            self.spans_acked == self.spans_sent


def raise_own_file_limit(needed: int) -> None:
    """This process's soft open-file limit raised to at least ``needed`` (its hard limit
    allowing); raises RuntimeError naming the limit otherwise."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            raise RuntimeError(f"this process may open only {hard} files, {needed} needed")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _bodies(run_id: str, index: int, requests: int, spans: int) -> list[bytes]:
    resource = {ResourceAttr.SERVICE_NAME: f"exporter-{index}", ResourceAttr.RUN_ID: run_id}
    return [span_request(spans, resource=resource).SerializeToString() for _ in range(requests)]


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """(status, whether the collector asked to close the connection)."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed before answering")
    status = int(status_line.split()[1])
    length, close = 0, False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection" and value.strip().lower() == "close":
            close = True
    await reader.readexactly(length)
    return status, close


async def _fleet(host: str, port: int, result: FleetResult, bodies: list[list[bytes]],
                 spans: int, deadline_s: float) -> None:
    opened = asyncio.Event()
    pending = [result.connections]
    started = time.monotonic()
    marks: dict[str, float] = {}

    async def exporter(own: list[bytes]) -> None:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            result.errors[f"connect: {exc.__class__.__name__}"] += 1
            own = []
            reader = writer = None
        pending[0] -= 1
        if not pending[0]:
            marks["connected"] = time.monotonic()
            opened.set()
        await opened.wait()  # every exporter holds its connection before any sends
        if writer is None:
            return
        try:
            for body in own:
                result.spans_sent += spans
                writer.write(b"POST /v1/traces HTTP/1.1\r\nHost: collector\r\n"
                             b"Content-Type: application/x-protobuf\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
                status, close = await _read_answer(reader)
                result.statuses[status] += 1
                if status == 200:
                    result.spans_acked += spans
                if close:
                    result.errors["closed by the collector after an answer"] += 1
                    return
        except (OSError, EOFError, asyncio.IncompleteReadError, ValueError) as exc:
            result.errors[exc.__class__.__name__] += 1
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

    async with asyncio.timeout(deadline_s):
        await asyncio.gather(*(exporter(b) for b in bodies))
    result.connected_s = marks.get("connected", time.monotonic()) - started
    result.sent_s = time.monotonic() - marks.get("connected", started)


def fleet(http_base: str, run_id: str, *, connections: int = 1000, requests: int = 10,
          spans: int = 5, deadline_s: float = 300.0) -> FleetResult:
    """``connections`` exporters, each with its own connection held open throughout, sending
    ``requests`` exports of ``spans`` spans each to ``http_base`` (http://host:port)."""
    host, port = http_base.removeprefix("http://").rsplit(":", 1)
    raise_own_file_limit(connections + 256)
    bodies = [_bodies(run_id, i, requests, spans) for i in range(connections)]
    result = FleetResult(connections=connections, requests=requests)
    asyncio.run(_fleet(host, int(port), result, bodies, spans, deadline_s))
    return result


TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


async def _grpc_fleet(target: str, result: FleetResult, bodies: list[list[bytes]], spans: int,
                      deadline_s: float) -> None:
    import grpc
    from google.rpc.error_details_pb2 import RetryInfo

    opened = asyncio.Event()
    pending = [result.connections]
    started = time.monotonic()
    marks: dict[str, float] = {}

    async def exporter(own: list[bytes]) -> None:
        # a channel of its own with a connection of its own (not one shared by channels to the
        # same address), as each exporter process has
        async with grpc.aio.insecure_channel(
                target, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
            try:
                await channel.channel_ready()
            except grpc.RpcError as exc:  # pragma: no cover - counted, not expected
                result.errors[f"connect: {exc.code().name}"] += 1
                own = []
            pending[0] -= 1
            if not pending[0]:
                marks["connected"] = time.monotonic()
                opened.set()
            await opened.wait()
            export = channel.unary_unary(TRACE_EXPORT)
            for body in own:
                result.spans_sent += spans
                while True:  # what the stock exporter retries, after the delay it is told
                    try:
                        await export(body, timeout=deadline_s)
                    except grpc.aio.AioRpcError as exc:
                        code = exc.code()
                        retry = dict(exc.trailing_metadata() or ()).get(
                            "google.rpc.retryinfo-bin")
                        if code is grpc.StatusCode.RESOURCE_EXHAUSTED and retry is not None:
                            result.statuses[code.name] += 1
                            delay = RetryInfo.FromString(retry).retry_delay
                            await asyncio.sleep(delay.seconds + delay.nanos / 1e9)
                            continue
                        result.errors[code.name] += 1
                        return
                    result.statuses["OK"] += 1
                    result.spans_acked += spans
                    break

    async with asyncio.timeout(deadline_s):
        await asyncio.gather(*(exporter(b) for b in bodies))
    result.connected_s = marks.get("connected", time.monotonic()) - started
    result.sent_s = time.monotonic() - marks.get("connected", started)


def grpc_fleet(target: str, run_id: str, *, connections: int = 1000, requests: int = 10,
               spans: int = 5, deadline_s: float = 300.0) -> FleetResult:
    """``fleet`` over OTLP/gRPC to ``target`` (host:port): each exporter a channel with its own
    connection. RESOURCE_EXHAUSTED with a RetryInfo is retried after its delay, as the stock
    exporter does, and counted in ``statuses``; anything else that is not OK is an error."""
    raise_own_file_limit(connections + 256)
    bodies = [_bodies(run_id, i, requests, spans) for i in range(connections)]
    result = FleetResult(connections=connections, requests=requests)
    asyncio.run(_grpc_fleet(target, result, bodies, spans, deadline_s))
    return result
