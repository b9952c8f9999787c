"""The dashboard's server against a gateway that asks for a token: it passes the browser's
token on, answers the gateway's refusals as HTTP statuses, and relays events as server-sent
events with their sequence and readable line."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from bus_helpers import pending, submitted
from gateway_helpers import TOKEN, running_gateway

from muster.bus import Bus
from muster.dashboard.server import build_app

pytestmark = pytest.mark.timeout(60)
BEARER = {"Authorization": f"Bearer {TOKEN}"}
Http = TestClient[web.Request, web.Application]  # the dashboard app, served for the test


@pytest.fixture
async def client(bus: Bus) -> AsyncIterator[Http]:
    async with (
        running_gateway(bus, token=TOKEN) as gw,
        TestClient(TestServer(build_app(gw.channel))) as http,
    ):
        yield http


async def test_without_the_token_the_gateways_refusal_is_a_401(client: Http) -> None:
    reply = await client.get("/api/queues")
    assert reply.status == 401
    assert (await reply.json())["code"] == "UNAUTHENTICATED"


async def test_with_the_token_lists_workloads_and_describes_one(client: Http, bus: Bus) -> None:
    await bus.publish_all([submitted("ml/w0"), pending("ml/w0", "1 more needed")])

    listed = await client.get("/api/workloads", headers=BEARER)
    assert listed.status == 200
    (item,) = (await listed.json())["items"]
    assert (item["key"], item["status"], item["message"]) == ("ml/w0", "PENDING", "1 more needed")
    missing = await client.get("/api/workload?namespace=ml&name=nope", headers=BEARER)
    assert missing.status == 404


async def test_events_arrive_as_server_sent_events(client: Http, bus: Bus) -> None:
    await bus.publish_all([submitted("ml/w0"), pending("ml/w0", "1 more needed")])

    reply = await client.get("/api/events?from=1", headers=BEARER)
    assert reply.headers["Content-Type"] == "text/event-stream"
    blocks: list[str] = []
    while len(blocks) < 2:
        block = (await reply.content.readuntil(b"\n\n")).decode()
        if not block.startswith(":"):
            blocks.append(block)
    reply.close()
    first = dict(line.split(": ", 1) for line in blocks[1].strip().splitlines())
    assert (first["id"], first["event"]) == ("2", "muster")
    data = json.loads(first["data"])
    assert (data["type"], data["workload"], data["detail"]) == (
        "workload.pending",
        "ml/w0",
        "WaitingForQuota: 1 more needed",
    )


@pytest.mark.parametrize(
    ("query", "headers", "problem"),
    [
        ("from=" + "9" * 30, {}, "from: must be a whole number from 0 to 9223372036854775807"),
        ("from=-5", {}, "from: must be a whole number"),
        ("from=" + "1" * 5000, {}, "from: must be a whole number"),
        ("from=1", {"Last-Event-ID": "²"}, "Last-Event-ID: must be a whole number"),
        ("from=1", {"Last-Event-ID": str(2**64 - 1)}, "Last-Event-ID: must be a whole number"),
    ],
)
async def test_a_hostile_resume_point_is_a_400_naming_it(
    client: Http, query: str, headers: dict[str, str], problem: str
) -> None:
    # They were a 500, or a 200 whose stream broke off once the Watch request was built.
    reply = await client.get(f"/api/events?{query}", headers={**BEARER, **headers})

    assert reply.status == 400
    assert (await reply.json())["error"].startswith(problem)
    assert (await client.get("/api/queues", headers=BEARER)).status == 200


async def test_on_loopback_a_request_for_another_host_name_is_refused(client: Http) -> None:
    # A page of evil.example that re-points its name at 127.0.0.1 (DNS rebinding) sends this.
    refused = await client.get("/api/workloads", headers={**BEARER, "Host": "evil.example:8080"})
    assert refused.status == 421
    assert "not a loopback name" in (await refused.json())["error"]

    for host in ("localhost:8080", "127.0.0.1:8080", "[::1]:8080"):
        assert (await client.get("/api/workloads", headers={**BEARER, "Host": host})).status == 200


@pytest.mark.parametrize("path", ["/api/queues", "/api/events?from=1"])
async def test_a_token_grpc_cannot_carry_is_a_400_naming_the_header(
    client: Http, path: str
) -> None:
    # "Bearer café" raised out of the gRPC call: a 500, or a stream that broke off.
    token = "Bearer café".encode().decode("latin-1")  # the bytes a browser would send

    reply = await client.get(path, headers={"Authorization": token})

    assert reply.status == 400
    assert (await reply.json())["error"].startswith("Authorization: must be 'Bearer TOKEN'")
