"""Fleet-sized fan-in: a thousand exporters holding kept-alive connections are all admitted and
every span they send is stored; past the connection cap (here made small with a low open-file
limit, so the path is taken every time) a sender gets an answer the stock exporters retry, not
a reset: OTLP/HTTP ``503`` + ``Retry-After`` after its request head, OTLP/gRPC ``UNAVAILABLE``;
and the stock exporters do retry it and succeed once a connection is free.

Every collector here is a real ``rolloutscope serve`` process over loopback. The header and
body timeouts are far longer than any test waits, so nothing is let in by a timeout; no
assertion is on time."""

from __future__ import annotations

import logging
import resource
import socket
import threading
import time
from contextlib import ExitStack
from urllib.parse import urlsplit

import pytest
from google.rpc import status_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rolloutscope.collectors.service import connection_caps
from tests.collectors.conftest import Collector, start_collector
from tests.collectors.fanin import fleet, grpc_fleet, raise_own_file_limit
from tests.collectors.otlp_fixtures import span_request

PATIENT = ("--header-timeout-s", "300", "--body-timeout-s", "300")
EXPORT_TIMEOUT_S = 120.0  # the stock exporters' own deadline, retries included
WAIT_S = 120.0


def _hard_limit() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1 << 20 if hard == resource.RLIM_INFINITY else hard


def _stored(c: Collector, run_id: str) -> tuple[int, int]:
    row = c.client.query_records(f"SELECT count(*) AS n, count(DISTINCT span_id) AS d "
                                 f"FROM spans WHERE run_id = '{run_id}'")[0]
    return row["n"], row["d"]


# -- sizing ------------------------------------------------------------------------------

@pytest.mark.parametrize(("limit", "configured", "expected"), [
    # 128 kept back, half each to HTTP and gRPC, the HTTP half less 1/16 (4..64) for the
    # connections being refused and 1/8 (4..128) for the accept backlog
    (256, None, (52, 4, 8)),
    (1024, None, (364, 28, 56)),
    (4096, None, (1792, 64, 128)),
    (20_000, None, (4096, 64, 128)),  # at most MAX_SIZED_CONNECTIONS unless asked
    (20_000, 9000, (9000, 64, 128)),
    (1024, 32, (32, 28, 56)),  # asked for fewer than the limit holds
    (1024, 5000, (364, 28, 56)),  # asked for more
    (64, None, (24, 4, 4)),  # below what is kept back: a floor of 32 a server
])
def test_connections_are_sized_from_the_open_file_limit(limit, configured, expected):
    caps = connection_caps(configured, limit)
    assert (caps.http, caps.refusing, caps.backlog) == expected and caps.grpc == caps.http


# -- a thousand kept-alive exporters -------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_thousand_kept_alive_exporters_are_all_admitted_and_every_span_stored(tmp_path,
                                                                                protocol):
    """Started with a soft limit of 1,024 open files (where 364 connections a server fit) and
    a hard limit of 4,096: the collector raises the soft limit and sizes its caps from it."""
    if _hard_limit() < 4096:
        pytest.skip(f"this test process may open only {_hard_limit()} files")
    raise_own_file_limit(1300)
    # a refused gRPC call retries after 30 s: a collector that refuses more than the odd call
    # runs the fleet past its 300 s deadline
    c = start_collector(tmp_path / "run.duckdb", *PATIENT, "--retry-after-s", "30",
                        open_files=(1024, 4096))
    try:
        if protocol == "http":
            result = fleet(c.http, "fleet", connections=1000, requests=10, spans=5)
            # every request answered 200 over its own connection, none closed or reset
            assert result.statuses == {200: 10_000}
        else:
            result = grpc_fleet(c.grpc, "fleet", connections=1000, requests=10, spans=5)
            # every call OK; RESOURCE_EXHAUSTED (retried after its RetryInfo, as the stock
            # exporter does) only when more than 4 are being read and decoded at once
            assert result.statuses["OK"] == 10_000
            assert set(result.statuses) <= {"OK", "RESOURCE_EXHAUSTED"}
        assert not result.errors, result
        assert result.spans_acked == 50_000
        assert _stored(c, "fleet") == (50_000, 50_000)
        connections = c.client.metrics()["connections"]
        assert connections["open_file_limit"] == 4096
        assert connections["http"]["max"] == connections["grpc_max"] == 1792
        assert connection_caps(None, 4096).http == 1792
        http = connections["http"]
        if protocol == "http":
            assert http["peak"] >= 1000  # all held at once
        assert (http["evicted_idle"], http["refused"], http["reset"]) == (0, 0, 0)
    finally:
        assert c.stop() == 0
    log = "".join(c.output)
    assert "connections per server" not in log and "Too many open files" not in log


# -- past the cap --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A collector started with 256 open files: 52 connections a server, 4 being refused."""
    c = start_collector(tmp_path_factory.mktemp("small") / "run.duckdb", *PATIENT,
                        open_files=(256, 256))
    yield c
    assert c.stop() == 0


def _address(c: Collector) -> tuple[str, int]:
    url = urlsplit(c.http)
    return url.hostname, url.port


def _connect(address: tuple[str, int], first: bytes = b"") -> socket.socket:
    sock = socket.create_connection(address, timeout=WAIT_S)
    if first:
        sock.sendall(first)
    return sock


def _answer(sock: socket.socket) -> bytes:
    """Everything the collector sends until it closes the connection; a reset fails."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


def _post_head(length: int) -> bytes:
    return (f"POST /v1/traces HTTP/1.1\r\nHost: collector\r\n"
            f"Content-Type: application/x-protobuf\r\nContent-Length: {length}\r\n\r\n").encode()


_STALLED = _post_head(100_000) + b"x" * 10  # a request whose body stops after 10 bytes
_METRICS = b"GET /metrics HTTP/1.1\r\nHost: collector\r\nConnection: close\r\n\r\n"


def _all_in_requests(c: Collector, held: ExitStack) -> list[socket.socket]:
    """Every connection the collector admits held in a request (a body that stops arriving),
    checked: a probe is answered 503. Returns the held sockets."""
    address = _address(c)
    deadline = time.monotonic() + WAIT_S
    # what an earlier test held is gone: only the metrics request is open
    while (http := c.client.metrics()["connections"]["http"])["open"] > 1 or http["refusing"]:
        assert time.monotonic() < deadline, http
        time.sleep(0.05)
    cap = http["max"]
    busy = [held.enter_context(_connect(address, _STALLED)) for _ in range(cap - 1)]
    # one slot left: the metrics request takes it without closing anyone
    while c.client.metrics()["connections"]["http"]["in_requests"] < cap:
        assert time.monotonic() < deadline, "the stalled requests never reached the routes"
        time.sleep(0.05)  # another process's progress: nothing to await
    busy.append(held.enter_context(_connect(address, _STALLED)))
    while True:
        # a probe is admitted only by closing an idle connection: the last one, if the
        # collector had not read its head yet; put it back and probe again
        probe = _connect(address, _METRICS)
        answer = _answer(probe)
        probe.close()
        if answer.startswith(b"HTTP/1.1 503"):
            return busy
        assert time.monotonic() < deadline, answer[:300]
        for i, sock in enumerate(busy):
            if _closed_by_peer(sock):
                busy[i] = held.enter_context(_connect(address, _STALLED))


def test_past_the_cap_a_request_is_answered_503_with_retry_after_not_reset(small):
    body = span_request(1000, run_id="refused").SerializeToString()
    request = _post_head(len(body)) + body
    with ExitStack() as held:
        _all_in_requests(small, held)
        for _ in range(20):
            # the whole request is sent before the answer is read, as the stock exporters
            # do: closing with it unread would reset the connection and lose the answer
            sock = _connect(_address(small), request)
            answer = _answer(sock)  # ConnectionResetError fails the test
            sock.close()
            head, _, status = answer.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            assert lines[0] == b"HTTP/1.1 503 Service Unavailable", answer[:300]
            assert b"Retry-After: 1" in lines and b"Connection: close" in lines
            assert b"Content-Type: application/x-protobuf" in lines
            refusal = status_pb2.Status.FromString(status)
            assert refusal.code == 14  # UNAVAILABLE
            assert refusal.message == ("the collector has 52 connections in requests, its "
                                       "limit; retry after 1 s")
    assert _stored(small, "refused") == (0, 0)
    http = small.client.metrics()["connections"]["http"]
    assert http["refused"] >= 20 and http["reset"] == 0 and http["max_refusing"] == 4


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        if "Transient error" in self.messages[-1]:
            self.seen.set()


def _export_in_thread(exporter, run_id: str, spans: int = 10):
    provider = TracerProvider(resource=Resource.create({"service.name": "stock",
                                                        "nemo.run.id": run_id}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(spans):
        provider.get_tracer("stock").start_span("stock.span", attributes={"i": i}).end()
    outcome: dict = {}
    thread = threading.Thread(
        target=lambda: outcome.setdefault("result", exporter.export(memory.get_finished_spans())),
        daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_past_the_cap_the_stock_exporter_retries_and_succeeds_once_a_connection_frees(
        small, protocol):
    records = _Records()
    logger = logging.getLogger("opentelemetry.exporter.otlp")
    logger.addHandler(records)
    run_id = f"retried-{protocol}"
    try:
        with ExitStack() as held:
            if protocol == "http":
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
                busy = _all_in_requests(small, held)
                exporter = OTLPSpanExporter(endpoint=f"{small.http}/v1/traces",
                                            timeout=EXPORT_TIMEOUT_S)
            else:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                    OTLPSpanExporter,
                )
                # connections that never complete their HTTP/2 handshake hold every slot
                host, port = small.grpc.rsplit(":", 1)
                cap = small.client.metrics()["connections"]["grpc_max"]
                busy = [held.enter_context(_connect((host, int(port)))) for _ in range(cap)]
                exporter = OTLPSpanExporter(endpoint=small.grpc, insecure=True,
                                            timeout=EXPORT_TIMEOUT_S)
            thread, outcome = _export_in_thread(exporter, run_id)
            # the first try is refused with what the exporter counts as transient
            assert records.seen.wait(WAIT_S), records.messages
            for sock in busy:  # connections free up
                sock.close()
            thread.join(EXPORT_TIMEOUT_S + 30)
            exporter.shutdown()
    finally:
        logger.removeHandler(records)
    assert outcome.get("result") is SpanExportResult.SUCCESS, records.messages
    assert _stored(small, run_id) == (10, 10)
    first = next(m for m in records.messages if "Transient error" in m)
    if protocol == "http":
        # the answer's Retry-After is the exporter's delay
        assert "Service Unavailable" in first and "retrying in 1.00s" in first, first
    else:
        assert "StatusCode.UNAVAILABLE" in first, first
    assert small.client.metrics()["connections"]["http"]["reset"] == 0


def _outcome(sock: socket.socket) -> str:
    try:
        sock.sendall(_METRICS)
        answer = _answer(sock)
    except (ConnectionResetError, BrokenPipeError):
        return "reset"
    if not answer:
        return "reset"
    assert answer.startswith(b"HTTP/1.1 503 Service Unavailable"), answer[:300]
    return "503"


def test_past_the_refusals_it_can_hold_a_connection_is_reset_and_counted(small):
    """Refusing holds a descriptor too: at most 4 are being answered here. Of eight that
    connect and wait before sending their heads, at most 4 get their answer when their heads
    arrive (fewer while a probe's refusal is still closing) and the others are reset."""
    address = _address(small)
    with ExitStack() as held:
        _all_in_requests(small, held)
        waiting = [held.enter_context(_connect(address)) for _ in range(8)]
        outcomes = [_outcome(sock) for sock in waiting]
    assert 1 <= outcomes.count("503") <= 4 and outcomes.count("reset") >= 4, outcomes
    deadline = time.monotonic() + WAIT_S
    while (http := small.client.metrics()["connections"]["http"])["refusing"]:
        assert time.monotonic() < deadline, http
        time.sleep(0.05)
    assert http["reset"] >= 1
