"""The gateway's gRPC server on grpc.aio (`--grpc-server aio`): every step of a call on the
gateway's own loop, no thread in between.

The same calls, checks and answers as `loop_server` (the default): every call but the health
service's is refused past `max_calls` in flight (RESOURCE_EXHAUSTED naming the limit, before
anything of it is read) and authenticated before its request is read, each handler being
registered as request-streaming with no deserializer; a request that does not decode answers
INVALID_ARGUMENT. What differs is where the call runs: gRPC's poller thread hands each step of
each call to the loop, and the handler runs there as gRPC's own task, which gRPC cancels when
the call ends early (the client cancelled, its deadline passed, the server stopped). Why this
is not the default: docs/benchmarks.md, "grpc.aio's server as an option".
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc
import grpc.aio

from muster.gateway.auth import CALLER, Authentication, authenticate
from muster.gateway.loop_server import (
    GRPC_LIMIT_FACTOR,
    HEALTH_PREFIX,
    AbortedError,
    WrappingServer,
    decoded,
    refused_message,
)
from muster.gateway.permissions import Caller


class AioServer(WrappingServer):
    """A `grpc.aio` server whose calls are checked as `loop_server.LoopServer`'s are; the
    servicers are added as to any server, with the generated `add_*Servicer_to_server`."""

    def __init__(
        self,
        authentication: Authentication,
        *,
        max_calls: int,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self._authentication = authentication
        self._max_calls = max_calls
        self._calls = _Calls()
        self._server = grpc.aio.server(
            options=options, maximum_concurrent_rpcs=GRPC_LIMIT_FACTOR * max_calls
        )
        super().__init__(self._server, self._checked)

    async def start(self) -> None:
        await self._server.start()

    async def stop(self, grace: float) -> None:
        """Refuse new calls, let those in flight finish within `grace` seconds, end the rest."""
        await self._server.stop(grace)

    def _checked(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        return checked(handler, method, self._authentication, self._calls, self._max_calls)


class _Calls:
    """The checked calls in flight (health's not counted)."""

    def __init__(self) -> None:
        self.in_flight = 0

    @contextlib.contextmanager
    def counted(self) -> Any:
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1


def checked(
    handler: grpc.RpcMethodHandler,
    method: str,
    authentication: Authentication,
    calls: _Calls,
    max_calls: int,
) -> grpc.RpcMethodHandler:
    """`handler` (async) as a request-streaming handler that refuses it past `max_calls` in
    flight and authenticates it (neither for health's calls), then reads its one request."""
    decode: Callable[[bytes], Any] = handler.request_deserializer or (lambda raw: raw)
    serialize = handler.response_serializer
    is_checked = not method.startswith(HEALTH_PREFIX)

    async def admitted(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Any:
        """The call's request, its caller set as `current_caller()`; the call ended with its
        status when refused."""
        if is_checked:
            if calls.in_flight > max_calls:  # this call counted: past the limit
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refused_message(max_calls))
            caller: Caller = await authenticate(authentication, context, method)
            CALLER.set(caller)
        raw = await anext(aiter(requests), None)
        try:
            return decoded(raw, decode, method)
        except AbortedError as exc:
            await context.abort(exc.code, exc.details)

    if handler.unary_unary is not None:
        unary = handler.unary_unary

        async def unary_call(
            requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
        ) -> Any:
            with calls.counted():
                return await unary(await admitted(requests, context), context)

        return grpc.stream_unary_rpc_method_handler(unary_call, response_serializer=serialize)
    if handler.unary_stream is not None:
        streaming = handler.unary_stream

        async def stream_call(
            requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            with calls.counted():
                produced = streaming(await admitted(requests, context), context)
                if not inspect.isasyncgen(produced):  # a coroutine that writes its responses
                    await produced
                    return
                # Closed at once when the call ends: its cleanup (a Watch's reader) must not
                # wait for the garbage collector.
                async with contextlib.aclosing(produced) as responses:
                    async for item in responses:
                        yield item

        return grpc.stream_stream_rpc_method_handler(stream_call, response_serializer=serialize)
    raise TypeError(f"{method}: request streaming RPCs are not served by the gateway")
