"""OTLP/gRPC transport (grpc.aio): the three ``Export`` methods over one ``OtlpReceiver``.

Handlers take the raw request bytes, so that a malformed message is answered with
INVALID_ARGUMENT naming the problem (the generated stubs would fail it inside gRPC). gRPC does
its own gzip; ``max_receive_message_length`` bounds the decompressed message. Backpressure is
RESOURCE_EXHAUSTED with a ``google.rpc.RetryInfo`` in the trailers, which is what makes the
stock exporters retry rather than drop.
"""

from __future__ import annotations

import hmac

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo

from rolloutscope.collectors.otlp.decode import PROTOBUF
from rolloutscope.collectors.otlp.errors import (
    BackpressureError,
    BadRequestError,
    UnavailableError,
)
from rolloutscope.collectors.otlp.receiver import OtlpReceiver
from rolloutscope.collectors.otlp.signals import Signal

RETRY_INFO_KEY = "google.rpc.retryinfo-bin"


def _retry_trailers(retry_after_s: float) -> tuple[tuple[str, bytes], ...]:
    delay = Duration()
    delay.FromNanoseconds(int(retry_after_s * 1e9))
    return ((RETRY_INFO_KEY, RetryInfo(retry_delay=delay).SerializeToString()),)


class OtlpGrpcHandlers:
    def __init__(self, receiver: OtlpReceiver) -> None:
        self.receiver = receiver

    def generic_handlers(self) -> list[grpc.GenericRpcHandler]:
        return [
            grpc.method_handlers_generic_handler(
                signal.grpc_service,
                {"Export": grpc.unary_unary_rpc_method_handler(self._handler(signal))})
            for signal in Signal
        ]

    def _handler(self, signal: Signal):
        async def export(body: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return await self.export(signal, body, context)
        return export

    async def export(self, signal: Signal, body: bytes,
                     context: grpc.aio.ServicerContext) -> bytes:
        counters = self.receiver.counters
        try:
            result = await self.receiver.export(signal, body, PROTOBUF)
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
        counters.requests[("grpc", "OK")] += 1
        response = signal.response_type()
        if result.rejected:
            setattr(response.partial_success, f"rejected_{signal.item_noun}", result.rejected)
            response.partial_success.error_message = result.message
        return response.SerializeToString()


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call without ``authorization: Bearer <token>`` (UNAUTHENTICATED)."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

        async def refuse(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

        self._refusal = grpc.unary_unary_rpc_method_handler(refuse)

    async def intercept_service(self, continuation, handler_call_details):
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else value
                if hmac.compare_digest(given, self._expected):
                    return await continuation(handler_call_details)
                break
        return self._refusal
