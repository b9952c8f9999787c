"""Helpers for gateway tests: an in-process gateway on a free port, with a real channel."""

from __future__ import annotations

import contextlib
import os
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import msgspec

from muster.bus import EVENTS_STREAM, Bus, BusConfig, connect
from muster.bus.progress import Tracker
from muster.contracts.v1 import services_pb2_grpc
from muster.gateway.auth_config import SecurityConfig
from muster.gateway.config import GatewayConfig, grpc_server
from muster.gateway.service import GatewayServer

JOB = textwrap.dedent(
    """\
    apiVersion: batch/v1
    kind: Job
    metadata:
      name: train
      namespace: ml
      labels: {kueue.x-k8s.io/queue-name: team-a}
    spec:
      parallelism: 2
      template:
        spec:
          containers:
          - name: c
            resources: {requests: {cpu: 500m, memory: 1Gi}}
    """
)
LOCAL_QUEUE = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n" + (
    "metadata: {name: team-a, namespace: ml}\nspec: {clusterQueue: team-a}\n"
)
BAD = textwrap.dedent(
    """\
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: Workload
    metadata: {name: w, namespace: ns}
    spec:
      podSets: [{name: main, count: lots, template: {spec: {containers: []}}}]
    """
)

# Which gRPC server the helpers' gateways run (`--grpc-server`): the default's, or the other's
# when the gateway tests are run again with MUSTER_TEST_GRPC_SERVER=aio.
SERVER = grpc_server(os.environ.get("MUSTER_TEST_GRPC_SERVER", "threads"))

TOKEN = "s3cret"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


def workload(name: str) -> str:
    """A one-pod Workload `name` in namespace ml, queue team-a."""
    return "\n".join(
        [
            "apiVersion: kueue.x-k8s.io/v1beta1",
            "kind: Workload",
            f"metadata: {{name: {name}, namespace: ml}}",
            "spec:",
            "  queueName: team-a",
            "  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}]",
        ]
    )


class RunningGateway(msgspec.Struct, kw_only=True):
    server: GatewayServer
    address: str
    channel: grpc.aio.Channel

    @property
    def gateway(self) -> services_pb2_grpc.GatewayStub:
        return services_pb2_grpc.GatewayStub(self.channel)

    @property
    def visibility(self) -> services_pb2_grpc.VisibilityStub:
        return services_pb2_grpc.VisibilityStub(self.channel)

    @property
    def events(self) -> services_pb2_grpc.EventsStub:
        return services_pb2_grpc.EventsStub(self.channel)


@contextlib.asynccontextmanager
async def running_gateway(
    bus: Bus,
    *,
    token: str | None = None,
    credentials: grpc.ChannelCredentials | None = None,
    submits: Tracker | None = None,
    **config: Any,
) -> AsyncIterator[RunningGateway]:
    """A GatewayServer on 127.0.0.1 and a free port, serving until the block ends; `token`
    is the legacy `--token`, `credentials` the channel's TLS (else plaintext), `submits` the
    watchdog's tracker of Submits in hand."""
    settings = {"listen": "127.0.0.1:0", "grace_s": 1.0, "grpc_server": SERVER, **config}
    if token is not None:
        settings["security"] = SecurityConfig(token=token)
    server = GatewayServer(bus, GatewayConfig(**settings), submits=submits)
    address = await server.start()
    try:
        if credentials is None:
            channel = grpc.aio.insecure_channel(address)
        else:
            channel = grpc.aio.secure_channel(address, credentials)
        async with channel:
            yield RunningGateway(server=server, address=address, channel=channel)
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def two_gateways(
    bus_config: BusConfig, **config: Any
) -> AsyncIterator[tuple[RunningGateway, RunningGateway]]:
    """Two gateways, each with its own connection (as two replicas have), with `config`."""
    one, other = await connect(bus_config), await connect(bus_config)
    try:
        async with running_gateway(one, **config) as a, running_gateway(other, **config) as b:
            yield a, b
    finally:
        await one.close()
        await other.close()


async def stored_count(bus: Bus) -> int:
    """How many messages MUSTER_EVENTS holds."""
    return int((await bus.js.stream_info(EVENTS_STREAM)).state.messages)


async def consumer_count(bus: Bus) -> int:
    """How many consumers MUSTER_EVENTS has (each Watch reads with one)."""
    return int((await bus.js.stream_info(EVENTS_STREAM)).state.consumer_count)
