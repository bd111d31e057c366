"""OTLP/gRPC transport (grpc.aio): the three ``Export`` methods over one ``OtlpReceiver``.

Handlers take the raw request bytes, so that a malformed message is answered with
INVALID_ARGUMENT naming the problem (the generated stubs would fail it inside gRPC). gRPC does
its own gzip; ``max_receive_message_length`` bounds the decompressed message. Backpressure is
RESOURCE_EXHAUSTED with a ``google.rpc.RetryInfo`` in the trailers, which is what makes the
stock exporters retry rather than drop.
"""

from __future__ import annotations

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo

from rolloutscope.auth import bearer_token_matches
from rolloutscope.collectors.otlp.budget import ROW_BYTES_PER_BODY_BYTE, Held, InflightBudget
from rolloutscope.collectors.otlp.decode import PROTOBUF
from rolloutscope.collectors.otlp.errors import (
    BackpressureError,
    BadRequestError,
    UnavailableError,
)
from rolloutscope.collectors.otlp.receiver import (
    Arrival,
    ExportResult,
    OtlpReceiver,
    fingerprint,
)
from rolloutscope.collectors.otlp.signals import Signal

RETRY_INFO_KEY = "google.rpc.retryinfo-bin"


def _retry_trailers(retry_after_s: float) -> tuple[tuple[str, bytes], ...]:
    delay = Duration()
    delay.FromNanoseconds(int(retry_after_s * 1e9))
    return ((RETRY_INFO_KEY, RetryInfo(retry_delay=delay).SerializeToString()),)


class OtlpGrpcHandlers:
    """The three ``Export`` methods. Each is registered as stream-unary, which reads the same
    bytes off the wire as unary but leaves reading the message to the handler: at most
    ``max_concurrent`` calls read and decode their messages at once, and a call refused for
    capacity (no slot free, or the ``InflightBudget`` spent) is answered RESOURCE_EXHAUSTED
    before its message is read into memory.

    A call holds its slot only while its message is read and decoded: waiting for its commit,
    its rows are held in the budget and its message is gone. (Holding it until the commit,
    as before, refused a fleet's exports that arrived together all but 4 per commit.) A refused
    call does not wait for a slot either: gRPC reads ahead the message of a call its handler
    has not read yet, 64 waiting 15 MiB calls raised the collector's peak by 1 GiB."""

    def __init__(self, receiver: OtlpReceiver, budget: InflightBudget, *,
                 max_concurrent: int) -> None:
        self.receiver = receiver
        self.budget = budget
        self.max_concurrent = max_concurrent
        self.active = 0  # calls reading or decoding their message

    def generic_handlers(self) -> list[grpc.GenericRpcHandler]:
        return [
            grpc.method_handlers_generic_handler(
                signal.grpc_service,
                {"Export": grpc.stream_unary_rpc_method_handler(self._handler(signal))})
            for signal in Signal
        ]

    def _handler(self, signal: Signal):
        async def export(requests, context: grpc.aio.ServicerContext) -> bytes:
            return await self.export(signal, requests, context)
        return export

    async def export(self, signal: Signal, requests,
                     context: grpc.aio.ServicerContext) -> bytes:
        counters = self.receiver.counters
        if self.active >= self.max_concurrent:
            counters.requests[("grpc", "RESOURCE_EXHAUSTED")] += 1
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"collector is at capacity ({self.active} gRPC exports being read, limit "
                f"{self.max_concurrent}); retry",
                trailing_metadata=_retry_trailers(self.budget.retry_after_s))
        self.active += 1
        slot = [True]

        def free_slot() -> None:  # once the message is decoded, or the call fails first
            if slot:
                slot.clear()
                self.active -= 1

        arrival = self.receiver.arrive()
        try:
            with self.budget.hold() as held:
                result = await self._export(signal, requests, held, arrival, free_slot)
        except BadRequestError as exc:
            counters.problems[exc.problem] += 1
            counters.requests[("grpc", "INVALID_ARGUMENT")] += 1
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, exc.message)
        except BackpressureError as exc:
            counters.requests[("grpc", "RESOURCE_EXHAUSTED")] += 1
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message,
                                trailing_metadata=_retry_trailers(exc.retry_after_s))
        except UnavailableError as exc:
            counters.requests[("grpc", "UNAVAILABLE")] += 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, exc.message,
                                trailing_metadata=_retry_trailers(exc.retry_after_s))
        finally:
            free_slot()
            arrival.done()
        counters.requests[("grpc", "OK")] += 1
        response = signal.response_type()
        if result.rejected or result.message:
            setattr(response.partial_success, f"rejected_{signal.item_noun}", result.rejected)
            response.partial_success.error_message = result.message
        return response.SerializeToString()

    async def _export(self, signal: Signal, requests, held: Held, arrival: Arrival,
                      free_slot) -> ExportResult:
        body = b""
        async for body in requests:  # a unary call: exactly one message
            break
        # gRPC has the message in memory already (and inflated it, up to its limit)
        size = len(body)
        held.reserve(size + ROW_BYTES_PER_BODY_BYTE * size, "the request and its rows")
        sent = fingerprint(body)
        decoded = self.receiver.decode(signal, body, PROTOBUF)
        del body  # only the rows wait for the commit
        held.release(size)
        free_slot()
        return await self.receiver.commit(signal, decoded, fingerprint=sent, arrival=arrival)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call without ``authorization: Bearer <token>`` (UNAUTHENTICATED), before
    its message is read."""

    def __init__(self, token: str) -> None:
        self._token = token

        async def refuse(requests, context: grpc.aio.ServicerContext) -> bytes:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

        self._refusal = grpc.stream_unary_rpc_method_handler(refuse)

    async def intercept_service(self, continuation, handler_call_details):
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                if bearer_token_matches(value, self._token):
                    return await continuation(handler_call_details)
                break
        return self._refusal
