"""The bearer-token check and the interceptor that applies it to every RPC but health."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from muster.gateway.auth import (
    UNAUTHENTICATED_MESSAGE,
    BearerTokenInterceptor,
    is_authorized,
    needs_token,
)


class Details(grpc.HandlerCallDetails):
    def __init__(self, method: str, metadata: tuple[tuple[str, str], ...]) -> None:
        self.method = method
        self.invocation_metadata = metadata


class AbortedError(Exception):
    pass


class Context:
    """The part of grpc.aio.ServicerContext a refusing handler uses."""

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise AbortedError


async def answer(request: Any, context: Any) -> str:
    return "answered"


async def stream(request: Any, context: Any) -> Any:
    yield "streamed"


async def run(behaviour: Any, context: Context, *, streaming: bool) -> None:
    if streaming:
        async for _ in behaviour(None, context):
            pass
    else:
        await behaviour(None, context)


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param([("authorization", "Bearer s3cret")], True, id="right"),
        pytest.param([("Authorization", b"Bearer s3cret")], True, id="bytes, any case"),
        pytest.param([("x", "y"), ("authorization", "Bearer s3cret")], True, id="among others"),
        pytest.param([("authorization", "Bearer wrong")], False, id="wrong token"),
        pytest.param([("authorization", "s3cret")], False, id="no Bearer"),
        pytest.param([("authorization", "Basic s3cret")], False, id="other scheme"),
        pytest.param([], False, id="none"),
        pytest.param(None, False, id="no metadata"),
    ],
)
def test_is_authorized_only_with_the_exact_bearer_token(
    metadata: list[tuple[str, str | bytes]] | None, expected: bool
) -> None:
    assert is_authorized(metadata, token="s3cret") is expected


def test_health_needs_no_token_and_everything_else_does() -> None:
    assert not needs_token("/grpc.health.v1.Health/Check")
    assert not needs_token("/grpc.health.v1.Health/Watch")
    assert needs_token("/muster.v1.Gateway/Submit")
    assert needs_token("/muster.v1.Events/Watch")


async def test_interceptor_passes_calls_with_the_token() -> None:
    handler = grpc.unary_unary_rpc_method_handler(answer)

    async def continuation(details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        return handler

    interceptor = BearerTokenInterceptor("s3cret")
    details = Details("/muster.v1.Gateway/Submit", (("authorization", "Bearer s3cret"),))

    assert await interceptor.intercept_service(continuation, details) is handler


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        pytest.param(grpc.unary_unary_rpc_method_handler, "unary_unary", id="unary"),
        pytest.param(grpc.unary_stream_rpc_method_handler, "unary_stream", id="stream"),
    ],
)
async def test_interceptor_refuses_calls_without_the_token_as_unauthenticated(
    make: Any, kind: str
) -> None:
    behaviour = answer if kind == "unary_unary" else stream

    async def continuation(details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        return make(behaviour)

    interceptor = BearerTokenInterceptor("s3cret")
    refused = await interceptor.intercept_service(
        continuation, Details("/muster.v1.Events/Watch", (("authorization", "Bearer no"),))
    )
    context = Context()

    with pytest.raises(AbortedError):
        await run(getattr(refused, kind), context, streaming=kind == "unary_stream")
    assert (context.code, context.details) == (
        grpc.StatusCode.UNAUTHENTICATED,
        UNAUTHENTICATED_MESSAGE,
    )


async def test_interceptor_lets_health_checks_through_without_a_token() -> None:
    handler = grpc.unary_unary_rpc_method_handler(answer)

    async def continuation(details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        return handler

    interceptor = BearerTokenInterceptor("s3cret")
    details = Details("/grpc.health.v1.Health/Check", ())

    assert await interceptor.intercept_service(continuation, details) is handler


def test_an_empty_token_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        BearerTokenInterceptor("")
