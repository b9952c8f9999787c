"""Who is calling, against the real gateway: the tokens file (reloaded), the legacy token,
the anonymous loopback default, UNAUTHENTICATED before the body is read, status codes, and
no credential in any log line."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from gateway_helpers import RunningGateway, running_gateway
from security_helpers import USERS, as_user, manifest, secured_gateway, token_of, tokens_yaml

from muster.bus import Bus
from muster.contracts.v1 import services_pb2
from muster.gateway.auth_config import SecurityConfig
from muster.gateway.config import GatewayConfig

pytestmark = pytest.mark.timeout(60)

SUBMIT = "/muster.v1.Gateway/Submit"


@pytest.fixture
async def gw(bus: Bus, tmp_path: Path) -> AsyncIterator[RunningGateway]:
    async with secured_gateway(bus, tmp_path, max_request_bytes=64 * 1024) as running:
        yield running


async def raw_submit(gw: RunningGateway, body: bytes, *, user: str | None) -> grpc.StatusCode:
    """Submit `body` as the request's bytes, as it is (not necessarily protobuf)."""
    call = gw.channel.unary_unary(SUBMIT)
    try:
        await call(body, metadata=as_user(user) if user else None, timeout=10)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def test_unknown_callers_are_refused_before_the_body_is_read(gw: RunningGateway) -> None:
    garbage = b"\xff\xff\xff\xff not protobuf"
    too_big = services_pb2.SubmitRequest(manifest="#" * (200 * 1024)).SerializeToString()

    # Unread: neither decoded (else INVALID_ARGUMENT) nor received (else RESOURCE_EXHAUSTED).
    assert await raw_submit(gw, garbage, user=None) == grpc.StatusCode.UNAUTHENTICATED
    assert await raw_submit(gw, too_big, user=None) == grpc.StatusCode.UNAUTHENTICATED
    assert await raw_submit(gw, garbage, user="nobody") == grpc.StatusCode.UNAUTHENTICATED


async def test_a_malformed_request_is_invalid_argument_and_too_big_is_resource_exhausted(
    gw: RunningGateway,
) -> None:
    # Field 1 (manifest), a string, holding bytes that are not UTF-8.
    bad_utf8 = b"\x0a\x02\xc3\x28"
    too_big = services_pb2.SubmitRequest(manifest="#" * (200 * 1024)).SerializeToString()

    assert (
        await raw_submit(gw, b"\xff\xff\xff\xff", user="root") == grpc.StatusCode.INVALID_ARGUMENT
    )
    assert await raw_submit(gw, bad_utf8, user="root") == grpc.StatusCode.INVALID_ARGUMENT
    assert await raw_submit(gw, too_big, user="root") == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_manifest_planning_cannot_take_is_invalid_argument_never_unknown(
    gw: RunningGateway,
) -> None:
    text = manifest("Workload:cpu", "team-a").replace("queueName: cpu", "priority: 2147483648")
    request = services_pb2.SubmitRequest(manifest=text).SerializeToString()

    assert await raw_submit(gw, request, user="root") == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_token_added_to_the_file_works_at_once_and_a_removed_one_stops(
    gw: RunningGateway, tmp_path: Path
) -> None:
    request = services_pb2.QueueStatusRequest()
    with pytest.raises(grpc.aio.AioRpcError) as before:
        await gw.visibility.QueueStatus(request, metadata=as_user("dave"), timeout=10)

    (tmp_path / "tokens.yaml").write_text(tokens_yaml({**USERS, "dave": ("muster:admins",)}))
    added = await gw.visibility.QueueStatus(request, metadata=as_user("dave"), timeout=10)
    (tmp_path / "tokens.yaml").write_text("tokens: [{sha256: not-a-hash, user: x}]\n")
    kept = await gw.visibility.QueueStatus(request, metadata=as_user("dave"), timeout=10)
    (tmp_path / "tokens.yaml").write_text(tokens_yaml({"root": ("platform",)}))
    with pytest.raises(grpc.aio.AioRpcError) as removed:
        await gw.visibility.QueueStatus(request, metadata=as_user("dave"), timeout=10)

    assert before.value.code() == removed.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert added is not None
    assert kept is not None  # a broken file keeps the last good one


async def test_the_policy_file_is_reloaded_too(gw: RunningGateway, tmp_path: Path) -> None:
    text = manifest("Job", "team-b")
    denied = gw.gateway.Submit(services_pb2.SubmitRequest(manifest=text), metadata=as_user("bob"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await denied
    policy = "rules: [{groups: [team-b], permissions: [submit], namespaces: [team-b]}]\n"
    (tmp_path / "policy.yaml").write_text(policy)

    reply = await gw.gateway.Submit(
        services_pb2.SubmitRequest(manifest=text), metadata=as_user("bob"), timeout=10
    )

    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reply.objects[0].kind == "Workload"


async def test_the_legacy_token_is_an_admin(bus: Bus) -> None:
    async with running_gateway(bus, token="legacy-s3cret") as gw:
        reply = await gw.gateway.Submit(
            services_pb2.SubmitRequest(manifest=manifest("ClusterQueue", "")),
            metadata=(("authorization", "Bearer legacy-s3cret"),),
            timeout=10,
        )

    assert [(o.kind, o.key) for o in reply.objects] == [("ClusterQueue", "x")]


async def test_without_authentication_loopback_callers_are_anonymous_admins(bus: Bus) -> None:
    async with running_gateway(bus) as gw:
        reply = await gw.gateway.Submit(
            services_pb2.SubmitRequest(manifest=manifest("Node", "")),
            metadata=(("authorization", "Bearer anything"),),  # means nothing here
            timeout=10,
        )

    assert [(o.kind, o.key) for o in reply.objects] == [("Node", "x")]


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.1", "gateway.example"])
def test_without_authentication_only_loopback_may_be_listened_on(host: str) -> None:
    with pytest.raises(ValueError, match="needs authentication"):
        GatewayConfig(listen=f"{host}:50051")
    GatewayConfig(listen=f"{host}:50051", security=SecurityConfig(token="t"))
    GatewayConfig(listen=f"{host}:50051", security=SecurityConfig(allow_anonymous=True))
    GatewayConfig(listen="[::1]:50051")
    GatewayConfig(listen="localhost:50051")


async def test_no_credential_reaches_a_log_line(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await raw_submit(gw, b"x", user="nobody")
    await raw_submit(gw, b"x", user=None)
    await raw_submit(
        gw, services_pb2.SubmitRequest(manifest="a: [").SerializeToString(), user="root"
    )
    await raw_submit(gw, manifest("Job", "team-b").encode(), user="alice")
    request = services_pb2.SubmitRequest(manifest=manifest("Job", "team-b"))
    with pytest.raises(grpc.aio.AioRpcError):
        await gw.gateway.Submit(request, metadata=as_user("alice"), timeout=10)

    assert "refused an unauthenticated call" in caplog.text
    for user in (*USERS, "nobody"):
        assert token_of(user) not in caplog.text
