"""Bearer-token authentication for the gateway's gRPC server (`--token`).

Every RPC except the health service must carry `authorization: Bearer <token>` metadata, else
it fails with UNAUTHENTICATED before its handler runs (and before a stream starts).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

import grpc
import grpc.aio

HEALTH_PREFIX: Final = "/grpc.health.v1.Health/"
UNAUTHENTICATED_MESSAGE: Final = "missing or invalid bearer token"

Metadata = Iterable[tuple[str, str | bytes]]


def is_authorized(metadata: Metadata | None, *, token: str) -> bool:
    """Whether `metadata` has `authorization: Bearer <token>` (compared in constant time)."""
    expected = f"Bearer {token}".encode()
    for key, value in metadata or ():
        if key.lower() != "authorization":
            continue
        given = value if isinstance(value, bytes) else value.encode()
        if hmac.compare_digest(given, expected):
            return True
    return False


def needs_token(method: str) -> bool:
    """Whether the RPC `method` ("/muster.v1.Gateway/Submit") requires the token."""
    return not method.startswith(HEALTH_PREFIX)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # untyped base
    """Refuses, with UNAUTHENTICATED, every call without the gateway's bearer token."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("BearerTokenInterceptor needs a non-empty token")
        self._token = token

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or not needs_token(handler_call_details.method):
            return handler
        if is_authorized(handler_call_details.invocation_metadata, token=self._token):
            return handler
        return _refusing(handler)


async def _refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)


async def _refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
    yield  # pragma: no cover  # makes this an async generator, as a streaming handler must be


def _refusing(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that aborts with UNAUTHENTICATED."""
    codec = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(_refuse, **codec)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(_refuse_stream, **codec)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(_refuse, **codec)
    return grpc.stream_stream_rpc_method_handler(_refuse_stream, **codec)
