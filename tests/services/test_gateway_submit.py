"""Gateway.Submit, auth and health against a real nats-server, over a real gRPC channel."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from bus_helpers import EventLog
from gateway_helpers import (
    AUTH,
    BAD,
    JOB,
    LOCAL_QUEUE,
    TOKEN,
    RunningGateway,
    running_gateway,
    stored_count,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc

from muster.bus import Bus
from muster.contracts.v1 import services_pb2
from muster.gateway.service import SERVICE_NAMES

pytestmark = pytest.mark.timeout(60)

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
async def gw(bus: Bus) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus) as running:
        yield running


async def submit(gw: RunningGateway, manifest: str, **kw: str) -> services_pb2.SubmitResponse:
    request = services_pb2.SubmitRequest(manifest=manifest, **kw)
    reply: services_pb2.SubmitResponse = await gw.gateway.Submit(request, timeout=10)
    return reply


async def test_submitted_job_is_published_as_workload_submitted(
    gw: RunningGateway, events: EventLog
) -> None:
    reply = await submit(gw, f"{LOCAL_QUEUE}---\n{JOB}")

    lq, wl = reply.objects
    assert (lq.kind, lq.key) == ("LocalQueue", "ml/team-a")
    assert wl.kind == "Workload"
    assert wl.key.startswith("ml/job-train-")
    env = await events.wait_for("workload.submitted", workload=wl.key)
    assert env.event_id == wl.event_id
    assert env.cluster == "local"
    assert env.submitted.queue_name == "team-a"
    assert [(p.name, p.count, dict(p.requests)) for p in env.submitted.pod_sets] == [
        ("main", 2, {"cpu": "500m", "memory": "1Gi"})
    ]
    assert (env.submitted.owner.kind, env.submitted.owner.name) == ("Job", "train")
    assert json.loads(env.submitted.manifest_json)["metadata"]["name"] == wl.key.split("/")[1]
    config = await events.wait_for("config.applied")
    assert (config.config_applied.kind, config.config_applied.name) == ("LocalQueue", "ml/team-a")
    assert config.sequence < env.sequence  # published in document order


async def test_submit_to_a_named_cluster_publishes_on_its_subjects(
    gw: RunningGateway, events: EventLog
) -> None:
    (wl,) = (await submit(gw, JOB, cluster="east")).objects

    env = await events.wait_for("workload.submitted", workload=wl.key)

    assert env.cluster == "east"


async def test_a_retried_submit_is_stored_once(
    gw: RunningGateway, bus: Bus, events: EventLog
) -> None:
    first = await submit(gw, JOB, idempotency_key="call-1")
    await events.wait_for("workload.submitted")
    again = await submit(gw, JOB, idempotency_key="call-1")

    assert [o.event_id for o in again.objects] == [o.event_id for o in first.objects]
    assert await stored_count(bus) == 1


WORKLOAD = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: w, namespace: ml}
spec:
  queueName: team-a
  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}]
"""


async def test_a_workload_submitted_again_already_exists_until_it_is_deleted(
    gw: RunningGateway, bus: Bus, events: EventLog
) -> None:
    """Admission ignores a `submitted` of a workload it knows, live or finished: the gateway
    says so and publishes nothing, as the Kubernetes path does; a retry of one Submit (same
    idempotency key) is that same submission; once deleted, the name is free again."""
    (first,) = (await submit(gw, WORKLOAD, idempotency_key="call-1")).objects
    stored = await events.wait_for("workload.submitted", workload="ml/w")
    retried = await submit(gw, WORKLOAD, idempotency_key="call-1")
    assert [o.event_id for o in retried.objects] == [first.event_id]

    again = await submit(gw, WORKLOAD, idempotency_key="call-2")
    assert [(o.kind, o.key, o.outcome, o.event_id) for o in again.objects] == [
        ("Workload", "ml/w", "exists", "")
    ]
    assert list(again.warnings) == ["Workload/ml/w: already exists; left as it is"]
    assert await stored_count(bus) == 1

    ref = services_pb2.ObjectRef(kind="Workload", namespace="ml", name="w")
    await gw.gateway.Delete(services_pb2.DeleteRequest(object=ref), timeout=10)
    after = await submit(gw, WORKLOAD, idempotency_key="call-3")
    (obj,) = after.objects
    assert (obj.outcome, list(after.warnings)) == ("", [])
    env = await events.wait_for_next("workload.submitted", after=stored)
    assert env.event_id == obj.event_id


async def test_malformed_manifest_is_invalid_argument_naming_object_and_field_and_publishes_nothing(
    gw: RunningGateway, bus: Bus
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await submit(gw, f"{JOB}---\n{BAD}")

    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == (
        "Workload/ns/w: spec.podSets[0].count: expected an integer, got a string"
    )
    assert await stored_count(bus) == 0  # not even the good Job


async def test_unknown_cluster_is_invalid_argument_naming_the_field(
    gw: RunningGateway, bus: Bus
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await submit(gw, JOB, cluster="east.1")

    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith("cluster: ")
    assert await stored_count(bus) == 0


async def test_oversized_request_is_resource_exhausted_and_the_gateway_keeps_serving(
    bus: Bus, events: EventLog
) -> None:
    async with running_gateway(bus, max_request_bytes=64 * 1024) as gw:
        padding = "#" * (100 * 1024) + "\n"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await submit(gw, padding + JOB)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        (wl,) = (await submit(gw, JOB)).objects
        await events.wait_for("workload.submitted", workload=wl.key)


async def test_manifest_larger_than_the_bus_limit_is_invalid_argument(bus: Bus) -> None:
    big = JOB.replace("  labels:", f"  annotations: {{note: {'x' * 3000}}}\n  labels:")
    async with running_gateway(bus, max_event_bytes=2048) as gw:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await submit(gw, big)

    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "manifest too large: " in (caught.value.details() or "")
    assert (caught.value.details() or "").endswith(" bytes > 2048")
    assert await stored_count(bus) == 0


async def test_caller_trace_continues_into_the_published_envelope(
    gw: RunningGateway, events: EventLog
) -> None:
    request = services_pb2.SubmitRequest(manifest=JOB)
    reply = await gw.gateway.Submit(request, metadata=(("traceparent", TRACEPARENT),), timeout=10)

    env = await events.wait_for("workload.submitted", workload=reply.objects[0].key)

    assert env.traceparent.split("-")[1] == TRACEPARENT.split("-")[1]


async def test_with_a_token_calls_without_it_are_unauthenticated(bus: Bus) -> None:
    async with running_gateway(bus, token=TOKEN) as gw:
        request = services_pb2.SubmitRequest(manifest=JOB)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.gateway.Submit(request, timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as wrong:
            await gw.gateway.Submit(request, metadata=(("authorization", "Bearer no"),))
        with pytest.raises(grpc.aio.AioRpcError) as watch:
            await gw.events.Watch(services_pb2.WatchRequest()).read()
        reply = await gw.gateway.Submit(request, metadata=AUTH, timeout=10)

    for refused in (caught, wrong, watch):
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert (
            refused.value.details()
            == "missing or invalid credentials (a bearer token or a client certificate)"
        )
    assert reply.objects[0].kind == "Workload"


async def test_health_is_serving_for_every_service_without_a_token(bus: Bus) -> None:
    async with running_gateway(bus, token=TOKEN) as gw:
        health = health_pb2_grpc.HealthStub(gw.channel)
        statuses = {
            name: (await health.Check(health_pb2.HealthCheckRequest(service=name))).status
            for name in ("", *SERVICE_NAMES)
        }

    assert set(SERVICE_NAMES) == {"muster.v1.Gateway", "muster.v1.Visibility", "muster.v1.Events"}
    assert set(statuses.values()) == {health_pb2.HealthCheckResponse.SERVING}


async def test_health_watch_on_the_gateway_port_streams_the_status_without_a_token(
    bus: Bus,
) -> None:
    async with running_gateway(bus, token=TOKEN) as gw:
        health = health_pb2_grpc.HealthStub(gw.channel)
        call = health.Watch(health_pb2.HealthCheckRequest(service="muster.v1.Gateway"))
        first = await asyncio.wait_for(call.read(), timeout=10)
        call.cancel()

    assert first.status == health_pb2.HealthCheckResponse.SERVING


async def test_health_is_not_serving_once_the_gateway_stops(bus: Bus) -> None:
    async with running_gateway(bus) as gw:
        # The service runtime serves the same health servicer on its own port.
        health_server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(gw.server.health, health_server)
        port = health_server.add_insecure_port("127.0.0.1:0")
        await health_server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            reply = await check(health_pb2.HealthCheckRequest(service="muster.v1.Gateway"))
    finally:
        await health_server.stop(grace=None)

    assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
