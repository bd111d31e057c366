"""Connections are bounded in time and number: idle and slow-header floods do not keep a real
exporter out, a slow body is 408, a collector whose connections are all in requests refuses
the next with 503 + Retry-After, and at a 1,024 file-descriptor limit 1,100 idle connections
neither stop the collector answering nor make it log without bound. After each case the
collector is up, the data it accepted before is intact and its memory is bounded."""

from __future__ import annotations

import resource
import socket
import subprocess
import time
from contextlib import ExitStack
from urllib.parse import urlsplit

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rolloutscope.cli.serve import READY_PREFIX
from tests.child_output import read_line
from tests.collectors import hostile
from tests.collectors.conftest import Collector, serve_command, start_collector
from tests.collectors.hostile import assert_sound
from tests.collectors.otlp_fixtures import span_request
from tests.collectors.sender import span_exporter

CAP = 32
# "within a few seconds": far less than the timeouts that could otherwise free a slot (120 s
# here), and than the retries a refusal would cost; the tests also check nothing was refused
REAL_EXPORT_S = 10.0


def _address(c: Collector) -> tuple[str, int]:
    url = urlsplit(c.http)
    return url.hostname, url.port


def _connect(address: tuple[str, int], first: bytes = b"") -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    if first:
        sock.sendall(first)
    return sock


def _answer(sock: socket.socket, deadline_s: float = 15.0) -> bytes:
    """Everything the collector sends until it closes the connection (or the deadline)."""
    sock.settimeout(deadline_s)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except (TimeoutError, ConnectionResetError):
        pass
    return b"".join(chunks)


def _real_export(endpoint: str, run_id: str, spans: int = 10) -> tuple[SpanExportResult, float]:
    """The stock OTLP/HTTP exporter sends ``spans`` spans; (its result, seconds it took)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "real",
                                                        "nemo.run.id": run_id}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(spans):
        provider.get_tracer("real").start_span("real.span", attributes={"i": i}).end()
    exporter = span_exporter("http", endpoint)
    try:
        started = time.monotonic()
        result = exporter.export(memory.get_finished_spans())
        return result, time.monotonic() - started
    finally:
        exporter.shutdown()


def _stored(c: Collector, run_id: str) -> int:
    return c.client.query_records(
        f"SELECT count(*) AS n FROM spans WHERE run_id = '{run_id}'")[0]["n"]


@pytest.fixture(scope="module")
def patient(tmp_path_factory):
    """A collector with a small connection cap and timeouts far longer than any test waits:
    whatever lets a real sender in here is the cap's eviction, not a timeout."""
    c = start_collector(tmp_path_factory.mktemp("patient") / "run.duckdb",
                        "--max-connections", str(CAP), "--header-timeout-s", "120",
                        "--body-timeout-s", "120")
    hostile.accept_the_before_data(c)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    """A collector with a small connection cap and 2 s header and body timeouts."""
    c = start_collector(tmp_path_factory.mktemp("strict") / "run.duckdb",
                        "--max-connections", str(CAP), "--header-timeout-s", "2",
                        "--body-timeout-s", "2")
    hostile.accept_the_before_data(c)
    yield c
    c.stop()


def test_an_idle_flood_past_the_cap_does_not_keep_a_real_exporter_out(patient):
    with ExitStack() as held:
        for _ in range(8 * CAP):
            held.enter_context(_connect(_address(patient)))
        result, took = _real_export(patient.http, "past-an-idle-flood")
        assert result is SpanExportResult.SUCCESS and took < REAL_EXPORT_S
    assert _stored(patient, "past-an-idle-flood") == 10
    connections = patient.client.metrics()["connections"]["http"]
    assert connections["evicted_idle"] >= 7 * CAP and connections["peak"] <= CAP
    assert connections["refused"] == 0  # the exporter got in at once, not after retries
    assert_sound(patient)


def test_a_slow_header_attack_does_not_delay_a_real_exporter(patient):
    address = _address(patient)
    with ExitStack() as held:
        slow = [held.enter_context(_connect(address, b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n"))
                for _ in range(4 * CAP)]
        for round_ in range(3):  # the attack keeps trickling header bytes
            for sock in slow:
                try:
                    sock.sendall(f"X-Slow-{round_}: 1\r\n".encode())
                except OSError:
                    pass  # evicted: the collector closed it
        result, took = _real_export(patient.http, "past-slow-headers")
        assert result is SpanExportResult.SUCCESS and took < REAL_EXPORT_S
    assert _stored(patient, "past-slow-headers") == 10
    assert_sound(patient)


def test_a_request_head_that_never_completes_is_closed_after_the_header_timeout(strict):
    sock = _connect(_address(strict), b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
    started = time.monotonic()
    answer = _answer(sock)
    sock.close()
    assert answer == b""  # closed without a response: there was no request to answer
    assert 1.5 < time.monotonic() - started < 12.0
    assert_sound(strict)


def test_a_body_that_stops_arriving_is_408_naming_the_timeout(strict):
    body = span_request(5).SerializeToString()
    head = (f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    sock = _connect(_address(strict), head + body[:10])
    answer = _answer(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"request body not received within 2 s (10 bytes arrived)" in answer
    assert_sound(strict)


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:  # evicted: the collector aborts the connection
        return True
    finally:
        sock.setblocking(True)


def test_when_every_connection_is_in_a_request_the_next_gets_503_and_retry_after(patient):
    body = span_request(5).SerializeToString()
    head = (f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    address = _address(patient)
    with ExitStack() as held:
        busy = [held.enter_context(_connect(address, head + body[:10])) for _ in range(CAP)]
        deadline = time.monotonic() + 30
        while True:
            # a probe is admitted only by closing an idle connection: one of ours whose head
            # the collector had not read yet; put it back and probe again
            probe = _connect(address, b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                      b"Connection: close\r\n\r\n")
            answer = _answer(probe, deadline_s=10)
            probe.close()
            if answer.startswith(b"HTTP/1.1 503"):
                break
            assert time.monotonic() < deadline, answer[:300]
            for i, sock in enumerate(busy):
                if _closed_by_peer(sock):
                    busy[i] = held.enter_context(_connect(address, head + body[:10]))
        assert b"Retry-After: 1" in answer and b"too_many_connections" in answer
        assert b"the collector has 32 connections in requests, its limit" in answer
    # the stalled requests gone, a real exporter gets in at once
    result, took = _real_export(patient.http, "after-the-busy-connections")
    assert result is SpanExportResult.SUCCESS and took < REAL_EXPORT_S
    assert patient.client.metrics()["connections"]["http"]["refused"] >= 1
    assert_sound(patient)


@pytest.mark.parametrize(("name", "sent", "message"), [
    ("TLS on the plain-text port", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
     b"Received HTTPS traffic on an HTTP port"),
    ("not HTTP at all", b"\x00\x01GARBAGE\r\n\r\n", b"Bad"),
    ("a header line over the size limit",
     b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n",
     b"Got more than 8190 bytes when reading"),
    ("a request line over the size limit", b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n",
     b"Got more than 8190 bytes when reading"),
])
def test_a_malformed_request_head_is_400_and_closed(strict, name, sent, message):
    sock = _connect(_address(strict), sent)
    answer = _answer(sock)
    sock.close()
    assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request"), answer[:200]
    assert message in answer
    assert_sound(strict)


def test_a_half_open_connection_is_closed_and_costs_nothing(strict):
    sock = _connect(_address(strict), b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
    sock.shutdown(socket.SHUT_WR)
    assert _answer(sock) == b""
    sock.close()
    assert_sound(strict)


def test_idle_connections_to_grpc_are_closed_after_the_handshake_timeout(strict):
    host, port = strict.grpc.rsplit(":", 1)
    socks = [_connect((host, int(port))) for _ in range(20)]
    started = time.monotonic()
    for sock in socks:  # gRPC says why as it closes: an HTTP/2 GOAWAY naming the timeout
        assert b"handshake timeout" in _answer(sock, deadline_s=20)
        sock.close()
    assert time.monotonic() - started < 20
    assert_sound(strict)


def _limited_to_1024_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


@pytest.mark.slow
def test_at_a_1024_fd_limit_1100_idle_connections_neither_stop_it_nor_flood_its_log(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"this test process may open only {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    proc = subprocess.Popen(serve_command(tmp_path / "run.duckdb", "--header-timeout-s", "120"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_limited_to_1024_fds)
    lines: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while not lines or not lines[-1].startswith(READY_PREFIX):
            lines.append(read_line(proc.stdout, deadline))
            assert lines[-1], "".join(lines[:-1])
        fields = dict(p.split("=", 1) for p in lines[-1][len(READY_PREFIX):].split())
        c = Collector(proc, tmp_path / "run.duckdb", fields["http"], fields["grpc"])
        hostile.accept_the_before_data(c)
        address = _address(c)
        with ExitStack() as held:
            for _ in range(1100):
                held.enter_context(_connect(address))
            result, took = _real_export(c.http, "at-the-fd-limit", spans=100)
            assert result is SpanExportResult.SUCCESS and took < REAL_EXPORT_S
            assert_sound(c)
            time.sleep(3)  # a window to see whether the flood makes it log on and on
        assert _stored(c, "at-the-fd-limit") == 100
        connections = c.client.metrics()["connections"]["http"]
        # half of what 128 kept back leaves (448), less the 28 (1/16) it may be refusing at
        # once and the 56 (1/8) its accept loop may take in one go
        assert connections["max"] == 364 and connections["max_refusing"] == 28
        assert connections["peak"] <= 364
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
        lines.append(out)
    log = "".join(lines)
    assert "Too many open files" not in log
    assert "at most 364 connections per server: the open-file limit is 1024 (hard limit " \
           "1024)" in log
    assert len(log.splitlines()) < 20, log[-3000:]
    assert proc.returncode == 0
