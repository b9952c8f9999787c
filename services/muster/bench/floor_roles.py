"""The processes of `bench floor`: muster's I/O per workload, and nothing else.

`python -m muster.bench.floor_roles ROLE NATS_URL` runs one stand-in for a service, on the same
transport as muster's (its NATS client, `PullFeed` readers, the publisher's PubAck awaits, the
gateway's threaded gRPC server), reading what that service reads and storing what it stores
(`bench.floor_wire`, today's layout: `floor_wire.LAYOUT`). Each decodes what it receives (the
Envelope with protobuf, JSON with msgspec) and decides nothing: a message's arrival is all it
takes to send the next. It prints `ready` (the gateway: `ready <address>`) once its readers are
in place, and stops on SIGTERM.

| role | reads | stores |
|---|---|---|
| gateway | a Submit (gRPC); `submitted` (its name index) | `submitted` on its name: the claim |
| admission | `submitted` (durable, acks all) | `admitted` |
| gangpermit | `submitted`, `admitted` (follow); the pod's two writes | `gang_permitted` |
| binder | `admitted`, `gang_permitted` (durable, acks each); `submitted` | pod on node |
| sim-cluster | the pod's two writes | pod Running |
| watcher | the pod's two writes | `running` |
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Final

import grpc
import msgspec
from nats.aio.msg import Msg
from nats.js import api

from muster.bench import floor_wire as wire
from muster.bus.client import MusterClient, connect
from muster.bus.envelope import decode
from muster.bus.publisher import Publisher
from muster.bus.pull import PullFeed
from muster.bus.service import run_loop
from muster.bus.subjects import EVENTS_STREAM, workload_filters
from muster.contracts.v1 import services_pb2
from muster.contracts.v1.events_pb2 import Envelope
from muster.gateway.auth import ANONYMOUS, Authentication
from muster.gateway.loop_server import LoopServer

ROLES: Final = ("gateway", "admission", "binder", "gangpermit", "sim-cluster", "watcher")
SIM_BUCKET: Final = f"MUSTER_SIM_{wire.CLUSTER}"
PODS: Final = f"$KV.{SIM_BUCKET}.pod.>"
ADMISSION_DURABLE: Final = "floor-admission"
BINDER_DURABLE: Final = "floor-binder"
BATCH: Final = 256
TAKE_S: Final = 1.0
_DECODE_JSON = msgspec.json.Decoder()
Handler = Callable[[list[Msg]], Awaitable[None]]


def filters(*events: str) -> list[str]:
    return [f for e in events for f in workload_filters(wire.CLUSTER, e)]


def read_event(msg: Msg) -> Envelope:
    """The Envelope, and a `submitted`'s Workload, decoded as muster's readers decode them."""
    env = decode(msg.data)
    if env.HasField("submitted"):
        _DECODE_JSON.decode(env.submitted.manifest_json)
    return env


def read_pod(msg: Msg) -> dict[str, Any]:
    pod: dict[str, Any] = _DECODE_JSON.decode(msg.data)
    return pod


class Node:
    """One role's connection, publisher and readers."""

    def __init__(self, nc: MusterClient) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.publisher = Publisher(nc, self.js, max_event_bytes=1024 * 1024, timeout_s=30.0)
        self.tasks: set[asyncio.Task[None]] = set()
        self.address = ""  # the gateway's gRPC address
        self.failed = asyncio.Event()  # a reader or handler raised: the stand-in stops

    async def store(self, message: tuple[str, bytes, dict[str, str]]) -> None:
        await self.publisher.publish_raw(*message)

    async def follow(self, stream: str, subjects: Sequence[str], handler: Handler) -> None:
        """An ephemeral reader of what comes from now on, as muster's follows and watches."""
        one = len(subjects) == 1
        info = await self.js.add_consumer(
            stream,
            config=api.ConsumerConfig(
                deliver_policy=api.DeliverPolicy.NEW,
                ack_policy=api.AckPolicy.NONE,
                max_deliver=1,
                filter_subject=subjects[0] if one else None,
                filter_subjects=None if one else list(subjects),
                inactive_threshold=60.0,
                num_replicas=1,
                mem_storage=True,
            ),
        )
        assert info.name is not None  # the server names an ephemeral consumer
        await self.durable(stream, info.name, handler)

    async def durable(self, stream: str, consumer: str, handler: Handler) -> None:
        """Hand each batch `consumer` delivers to `handler`, in order, until stopped."""
        feed = PullFeed(self.nc, stream=stream, consumer=consumer, batch=BATCH, expires_s=5.0)
        await feed.start()
        self.spawn(self._pump(feed, handler))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            print(f"floor stand-in failed: {task.exception()!r}", file=sys.stderr)
            self.failed.set()

    @staticmethod
    async def _pump(feed: PullFeed, handler: Handler) -> None:
        while True:
            msgs = await feed.take(BATCH, timeout_s=TAKE_S)
            if msgs:
                await handler(msgs)

    def each(self, handle: Callable[[Msg], Coroutine[Any, Any, None]]) -> Handler:
        """A handler running `handle` on each message at once, as muster's lanes do."""

        async def handler(msgs: list[Msg]) -> None:
            for msg in msgs:
                self.spawn(handle(msg))

        return handler


async def decoded(msgs: list[Msg]) -> None:
    """A follow's handler that only decodes (the gateway's name index, the binder's spec)."""
    for msg in msgs:
        read_event(msg)


def workload_of_pod(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}/{meta['labels']['muster.dev/workload']}"


class FloorGateway:
    """`Gateway.Submit` only: the `submitted` on its name's subject, the claim, one PubAck."""

    def __init__(self, node: Node) -> None:
        self.node = node

    async def Submit(  # noqa: N802  # gRPC's method name
        self, request: services_pb2.SubmitRequest, context: Any
    ) -> services_pb2.SubmitResponse:
        workload = wire.workload_of(request.manifest)
        # The client sends JSON: its bytes stand for the Workload JSON muster's planning makes
        # (YAML read, checked, written again: muster's work, not the transport's).
        env = wire.event("submitted", workload, manifest_json=request.manifest)
        await self.node.store(wire.claimed(env))
        done = services_pb2.SubmittedObject(kind="Workload", key=workload, event_id=env.event_id)
        return services_pb2.SubmitResponse(objects=[done])


async def gateway(node: Node) -> LoopServer:
    await node.follow(EVENTS_STREAM, filters("submitted"), decoded)
    server = LoopServer(
        asyncio.get_running_loop(),
        Authentication(anonymous=ANONYMOUS),
        max_calls=256,
        options=[("grpc.http2.bdp_probe", 0)],
    )
    submit = grpc.unary_unary_rpc_method_handler(
        FloorGateway(node).Submit,
        request_deserializer=services_pb2.SubmitRequest.FromString,
        response_serializer=services_pb2.SubmitResponse.SerializeToString,
    )
    server.add_registered_method_handlers("muster.v1.Gateway", {"Submit": submit})
    node.address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    return server


async def admission(node: Node) -> None:
    """Each batch's `admitted` in one flight, then one ack for the batch (AckPolicy.ALL)."""

    async def round_(msgs: list[Msg]) -> None:
        envs = [read_event(m) for m in msgs]
        admitted = (wire.event("admitted", e.workload, cause=e.event_id) for e in envs)
        await asyncio.gather(*(node.store(wire.event_message(a, fenced=True)) for a in admitted))
        await msgs[-1].ack()

    await node.durable(EVENTS_STREAM, ADMISSION_DURABLE, round_)


async def binder(node: Node) -> None:
    """`admitted`: nothing to make yet; `gang_permitted`: the pod made on its node, its only
    answer (`--bound-events binds`, as every launcher of muster starts its binder)."""

    async def handle(msg: Msg) -> None:
        env = read_event(msg)
        if env.HasField("gang_permitted"):
            await node.store(wire.pod_message(env.workload, "created", revision=0))
        await msg.ack()

    await node.follow(EVENTS_STREAM, filters("submitted"), decoded)
    await node.durable(EVENTS_STREAM, BINDER_DURABLE, node.each(handle))


async def gangpermit(node: Node) -> None:
    """The gang placed once admitted, before its pods exist; the pods' writes read only."""

    async def handle(msg: Msg) -> None:
        env = read_event(msg)
        if env.HasField("admitted"):
            permitted = wire.event("gang_permitted", env.workload, cause=env.event_id)
            await node.store(wire.event_message(permitted))

    async def pods(msgs: list[Msg]) -> None:
        for msg in msgs:
            read_pod(msg)

    await node.follow(EVENTS_STREAM, filters("submitted", "admitted"), node.each(handle))
    await node.follow(f"KV_{SIM_BUCKET}", [PODS], pods)


async def sim_cluster(node: Node) -> None:
    """A pod made on its node (Pending) runs: written at the revision it was read at."""

    async def handle(msg: Msg) -> None:
        pod = read_pod(msg)
        if pod["status"]["phase"] != "Running":
            workload = workload_of_pod(pod)
            revision = msg.metadata.sequence.stream
            await node.store(wire.pod_message(workload, "running", revision=revision))

    await node.follow(f"KV_{SIM_BUCKET}", [PODS], node.each(handle))


async def watcher(node: Node) -> None:
    async def handle(msg: Msg) -> None:
        pod = read_pod(msg)
        if pod["status"]["phase"] == "Running":
            workload = workload_of_pod(pod)
            running = wire.event("running", workload, cause=workload)
            await node.store(wire.event_message(running))

    await node.follow(f"KV_{SIM_BUCKET}", [PODS], node.each(handle))


async def serve(role: str, url: str) -> None:
    stop = asyncio.Event()
    nc = await connect(url, name=f"muster-floor-{role}")
    node = Node(nc)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    server = await gateway(node) if role == "gateway" else None
    if server is None:
        await STAND_INS[role](node)
    print(f"ready {node.address}".rstrip(), flush=True)
    ended = [asyncio.create_task(e.wait()) for e in (stop, node.failed)]
    await asyncio.wait(ended, return_when=asyncio.FIRST_COMPLETED)
    for waiting in ended:
        waiting.cancel()
    if server is not None:
        await server.stop(0)
    for task in list(node.tasks):
        task.cancel()
    await nc.close()
    if node.failed.is_set():
        raise SystemExit(1)


STAND_INS: Final[dict[str, Callable[[Node], Awaitable[None]]]] = {
    "admission": admission,
    "binder": binder,
    "gangpermit": gangpermit,
    "sim-cluster": sim_cluster,
    "watcher": watcher,
}


def main(argv: Sequence[str]) -> None:
    role, url = argv
    if role not in ROLES:
        raise SystemExit(f"floor role must be one of {', '.join(ROLES)}, got {role!r}")
    run_loop(serve(role, url))


if __name__ == "__main__":
    main(sys.argv[1:])
