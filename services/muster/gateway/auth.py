"""Who is calling: every RPC but the health service is authenticated before its request is read.

`AuthInterceptor` turns each handler into one that reads its request itself: it first finds
the caller (a verified client certificate, else `authorization: Bearer <token>` checked by
each token authenticator in turn), and answers UNAUTHENTICATED without reading the body when
there is none. Only then is the one request message read and decoded; one that does not
decode answers INVALID_ARGUMENT (gRPC's own decoding would answer UNKNOWN). The handler finds
the caller with `current_caller()`.

Without any authentication configured the gateway may only listen on loopback (checked by
`GatewayConfig`), and every caller is `muster:anonymous` in group `muster:admins`: the local
demo works with no setup.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, NoReturn, Protocol

import grpc
import grpc.aio

from muster.gateway.auth_certs import subject_caller
from muster.gateway.permissions import ADMIN_GROUP, Caller

log = logging.getLogger(__name__)

HEALTH_PREFIX: Final = "/grpc.health.v1.Health/"
UNAUTHENTICATED_MESSAGE: Final = (
    "missing or invalid credentials (a bearer token or a client certificate)"
)
ANONYMOUS: Final = Caller(user="muster:anonymous", groups=(ADMIN_GROUP,), via="anonymous")

Metadata = Iterable[tuple[str, str | bytes]]
_CALLER: contextvars.ContextVar[Caller] = contextvars.ContextVar("muster_gateway_caller")


class AuthenticationUnavailableError(Exception):
    """The caller could not be checked now (the API server did not answer a TokenReview)."""


class TokenAuthenticator(Protocol):
    """Who a bearer token stands for, or None when this authenticator does not know it."""

    async def authenticate(self, token: str) -> Caller | None: ...


class Authentication:
    """The chain every call goes through: client certificate, then bearer tokens.

    `anonymous` (only when nothing else is configured) is who a call without credentials is.
    """

    def __init__(
        self,
        *,
        tokens: Sequence[TokenAuthenticator] = (),
        certificates: bool = False,
        anonymous: Caller | None = None,
    ) -> None:
        self.tokens = tuple(tokens)
        self.certificates = certificates
        self.anonymous = anonymous

    async def caller(
        self, metadata: Metadata | None, auth_context: dict[str, list[bytes]] | None
    ) -> Caller | None:
        """Who is calling, or None. A certificate wins over a token, as in Kubernetes."""
        if self.certificates and auth_context:
            found = subject_caller(auth_context)
            if found is not None:
                return found
        token = bearer_token(metadata)
        if token is not None and self.tokens:  # with none configured a token means nothing
            for authenticator in self.tokens:
                found = await authenticator.authenticate(token)
                if found is not None:
                    return found
            return None  # a token nobody knows is refused, even where anonymous is allowed
        return self.anonymous


def bearer_token(metadata: Metadata | None) -> str | None:
    """The token of the first `authorization: Bearer <token>` metadata entry, if any."""
    for key, value in metadata or ():
        if key.lower() != "authorization":
            continue
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        scheme, _, token = text.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


def current_caller() -> Caller:
    """The caller of the RPC being handled (set by `AuthInterceptor`)."""
    return _CALLER.get()


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # untyped base
    """Authenticates every call but health before reading its request (see the module doc)."""

    def __init__(self, authentication: Authentication) -> None:
        self._authentication = authentication

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(HEALTH_PREFIX):
            return handler
        return _guarded(handler, self._authentication, handler_call_details.method)


def _guarded(
    handler: grpc.RpcMethodHandler, authentication: Authentication, method: str
) -> grpc.RpcMethodHandler:
    """`handler` as a request-streaming handler: gRPC then leaves reading the request to it."""
    decode: Callable[[bytes], Any] = handler.request_deserializer or (lambda raw: raw)
    serialize = handler.response_serializer

    async def admitted(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Any:
        caller = await _authenticate(authentication, context, method)
        request = await _one_request(requests, context, decode, method)
        return caller, request

    if handler.unary_unary is not None:
        unary = handler.unary_unary

        async def unary_call(requests: AsyncIterator[bytes], context: Any) -> Any:
            caller, request = await admitted(requests, context)
            token = _CALLER.set(caller)
            try:
                return await unary(request, context)
            finally:
                _CALLER.reset(token)

        return grpc.stream_unary_rpc_method_handler(unary_call, response_serializer=serialize)
    if handler.unary_stream is not None:
        streaming = handler.unary_stream

        async def stream_call(requests: AsyncIterator[bytes], context: Any) -> Any:
            caller, request = await admitted(requests, context)
            _CALLER.set(caller)  # this generator's own context: nothing to reset
            async for response in streaming(request, context):
                yield response

        return grpc.stream_stream_rpc_method_handler(stream_call, response_serializer=serialize)
    raise TypeError(f"{method}: request streaming RPCs are not served by the gateway")


async def _authenticate(
    authentication: Authentication, context: grpc.aio.ServicerContext, method: str
) -> Caller:
    try:
        caller = await authentication.caller(context.invocation_metadata(), context.auth_context())
    except AuthenticationUnavailableError as exc:
        await _abort(context, grpc.StatusCode.UNAVAILABLE, f"cannot check credentials now: {exc}")
    if caller is None:
        # The peer and method only: never the credential.
        log.info("refused an unauthenticated call to %s from %s", method, context.peer())
        await _abort(context, grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
    return caller


async def _one_request(
    requests: AsyncIterator[bytes],
    context: grpc.aio.ServicerContext,
    decode: Callable[[bytes], Any],
    method: str,
) -> Any:
    """Read and decode the call's one request message; INVALID_ARGUMENT when it will not."""
    raw = await anext(aiter(requests), None)
    if raw is None:
        await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"{method}: no request message")
    try:
        return decode(raw)
    except Exception as exc:  # protobuf's DecodeError, or invalid UTF-8 in a string field
        name = method.rsplit("/", 1)[-1]
        await _abort(
            context,
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the {name} request is not a valid message ({len(raw)} bytes): {exc}",
        )


async def _abort(
    context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str
) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("unreachable: ServicerContext.abort raises")
