"""OTLP/HTTP transport (aiohttp): ``POST /v1/traces|metrics|logs``, protobuf or JSON, gzip.

Reads the body itself (bounded in size and time: a body that does not arrive within the body
timeout is 408), decompresses it itself (bounded: a gzip bomb stops at ``max_decoded_bytes``),
holding what it reads, inflates and decodes within the collector's ``InflightBudget`` (past it:
429 + Retry-After), hands it to ``OtlpReceiver`` and answers as the OTLP/HTTP spec says:
200 with an ``Export*ServiceResponse`` (``partial_success`` when some items were rejected), 4xx
with a ``google.rpc.Status`` naming the problem, 429/503 with ``Retry-After`` when the sender
should retry. Responses use the request's encoding.
"""

from __future__ import annotations

import asyncio
import math
import zlib

import orjson
from aiohttp import web
from google.protobuf import json_format
from google.rpc import status_pb2

from rolloutscope.collectors.otlp.budget import ROW_BYTES_PER_BODY_BYTE, Held, InflightBudget
from rolloutscope.collectors.otlp.decode import JSON, PROTOBUF
from rolloutscope.collectors.otlp.errors import (
    BackpressureError,
    BadRequestError,
    PayloadTooLargeError,
    UnavailableError,
    UnsupportedMediaError,
)
from rolloutscope.collectors.otlp.receiver import (
    Arrival,
    ExportResult,
    OtlpReceiver,
    fingerprint,
)
from rolloutscope.collectors.otlp.signals import Signal

CONTENT_TYPES = {"application/x-protobuf": PROTOBUF, "application/protobuf": PROTOBUF,
                 "application/json": JSON}
_MEDIA = {PROTOBUF: "application/x-protobuf", JSON: "application/json"}
_READ_CHUNK = 1 << 20
_INFLATE_CHUNK = 1 << 20


def _encoding_of(request: web.Request) -> str:
    media = request.content_type  # lower-cased, without parameters
    encoding = CONTENT_TYPES.get(media)
    if encoding is None:
        raise UnsupportedMediaError(
            "unsupported_content_type",
            f"unsupported content type {media!r}; send application/x-protobuf or "
            f"application/json")
    return encoding


class BodyTimeoutError(BadRequestError):
    """The body did not arrive within the collector's body timeout (a slow or stalled sender)."""

    status = 408

    def __init__(self, timeout_s: float, received: int) -> None:
        super().__init__("body_timeout", f"request body not received within {timeout_s:g} s "
                                         f"({received} bytes arrived)")


async def read_body(request: web.Request, max_body: int, held: Held | None = None,
                    timeout_s: float | None = None) -> bytes:
    """The raw body, refusing more than ``max_body`` bytes before reading them all, reserving
    what it holds in ``held`` (the declared length before reading a byte), and giving up after
    ``timeout_s``."""
    declared = request.content_length
    if declared is not None and declared > max_body:
        raise PayloadTooLargeError("body_too_large",
                                   f"body of {declared} bytes exceeds the limit of {max_body}")
    if held is not None and declared:
        held.reserve(declared, "the request body")
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                chunk = await request.content.read(_READ_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_body:
                    raise PayloadTooLargeError("body_too_large",
                                               f"body exceeds the limit of {max_body} bytes")
                if held is not None and size > (declared or 0):
                    held.reserve(len(chunk), "the request body")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyTimeoutError(timeout_s, size) from None
    return b"".join(chunks)


def decompress(body: bytes, content_encoding: str, max_decoded: int,
               held: Held | None = None) -> bytes:
    """Undo ``Content-Encoding``; never expands past ``max_decoded`` bytes, reserving in
    ``held`` what it expands to as it goes."""
    coding = content_encoding.strip().lower()
    if coding in ("", "identity"):
        return body
    if coding != "gzip":
        raise UnsupportedMediaError(
            "unsupported_content_encoding",
            f"unsupported content encoding {content_encoding!r}; send gzip or identity")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    chunks, size, data = [], 0, body
    try:
        while True:
            chunk = inflater.decompress(data, min(_INFLATE_CHUNK, max_decoded - size + 1))
            size += len(chunk)
            if size > max_decoded:
                raise PayloadTooLargeError(
                    "decoded_too_large",
                    f"gzip body expands beyond the limit of {max_decoded} bytes")
            if held is not None:
                held.reserve(len(chunk), "the decompressed body")
            chunks.append(chunk)
            data = inflater.unconsumed_tail
            if not data or inflater.eof:
                break
        tail = inflater.flush()
    except zlib.error as exc:
        raise BadRequestError("bad_gzip", f"body is not valid gzip: {exc}") from None
    if size + len(tail) > max_decoded:
        raise PayloadTooLargeError("decoded_too_large",
                                   f"gzip body expands beyond the limit of {max_decoded} bytes")
    if not inflater.eof:
        raise BadRequestError("bad_gzip", "gzip body is truncated")
    chunks.append(tail)
    return b"".join(chunks)


def _status_body(encoding: str, code: int, message: str) -> bytes:
    status = status_pb2.Status(code=code, message=message)
    if encoding == PROTOBUF:
        return status.SerializeToString()
    return orjson.dumps(json_format.MessageToDict(status))


def error_response(encoding: str, http_status: int, grpc_code: int, message: str,
                   retry_after_s: float | None = None) -> web.Response:
    headers = {}
    if retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))  # RFC 9110: integer
    return web.Response(status=http_status, body=_status_body(encoding, grpc_code, message),
                        content_type=_MEDIA[encoding], headers=headers)


def _success(signal: Signal, encoding: str, result: ExportResult) -> web.Response:
    response = signal.response_type()
    if result.rejected or result.message:
        # with nothing rejected, the message is a warning (what was coerced), as OTLP allows
        setattr(response.partial_success, f"rejected_{signal.item_noun}", result.rejected)
        response.partial_success.error_message = result.message
    if encoding == PROTOBUF:
        body = response.SerializeToString()
    else:
        body = orjson.dumps(json_format.MessageToDict(response))
    return web.Response(status=200, body=body, content_type=_MEDIA[encoding])


# google.rpc.Code numbers used in Status bodies
_INVALID_ARGUMENT, _RESOURCE_EXHAUSTED, _UNAVAILABLE = 3, 8, 14


class OtlpHttpRoutes:
    """The three export routes over one ``OtlpReceiver``, within one ``InflightBudget``."""

    def __init__(self, receiver: OtlpReceiver, budget: InflightBudget, *,
                 body_timeout_s: float) -> None:
        self.receiver = receiver
        self.budget = budget
        self.body_timeout_s = body_timeout_s

    def add_to(self, app: web.Application) -> None:
        for signal in Signal:
            app.router.add_post(f"/v1/{signal.value}", self._handler(signal))

    def _handler(self, signal: Signal):
        async def handle(request: web.Request) -> web.Response:
            return await self.handle(signal, request)
        return handle

    async def handle(self, signal: Signal, request: web.Request) -> web.Response:
        counters = self.receiver.counters
        encoding = JSON
        arrival = self.receiver.arrive()
        with self.budget.hold() as held:
            try:
                encoding = _encoding_of(request)
                result = await self._export(signal, request, encoding, held, arrival)
            except BadRequestError as exc:
                counters.requests[("http", f"{exc.status}")] += 1
                counters.problems[exc.problem] += 1
                return error_response(encoding, exc.status, _INVALID_ARGUMENT, exc.message)
            except BackpressureError as exc:
                counters.requests[("http", "429")] += 1
                return error_response(encoding, 429, _RESOURCE_EXHAUSTED, exc.message,
                                      exc.retry_after_s)
            except UnavailableError as exc:
                counters.requests[("http", "503")] += 1
                return error_response(encoding, 503, _UNAVAILABLE, exc.message,
                                      exc.retry_after_s)
            except ConnectionError:
                # the sender went away mid-request: nobody to answer, nothing to log
                counters.requests[("http", "sender_gone")] += 1
                return web.Response(status=499)
            finally:
                arrival.done()
        counters.requests[("http", "200")] += 1
        return _success(signal, encoding, result)

    async def _export(self, signal: Signal, request: web.Request, encoding: str,
                      held: Held, arrival: Arrival) -> ExportResult:
        limits = self.receiver.limits
        coding = request.headers.get("Content-Encoding", "")
        declared = request.content_length
        upfront = coding.strip().lower() in ("", "identity") and bool(declared)
        if upfront and declared <= limits.max_body_bytes:
            # the body is what gets decoded: its rows are reserved with it, before a byte is
            # read, so a refusal costs neither memory nor the time to read the body
            held.reserve(declared * (1 + ROW_BYTES_PER_BODY_BYTE), "the request and its rows")
        raw = await read_body(request, limits.max_body_bytes, None if upfront else held,
                              self.body_timeout_s)
        body = decompress(raw, coding, limits.max_decoded_bytes, held)
        read = len(raw) + (len(body) if body is not raw else 0)
        rows = ROW_BYTES_PER_BODY_BYTE * len(body)
        if read + rows > held.bytes:  # the rows are reserved before they exist
            held.reserve(read + rows - held.bytes, "its decoded rows")
        sent = fingerprint(body)
        decoded = self.receiver.decode(signal, body, encoding)
        # the body and the parsed message are gone; only the rows wait for the commit
        del raw, body
        held.release(held.bytes - rows)
        return await self.receiver.commit(signal, decoded, fingerprint=sent, arrival=arrival)
