"""Pending lists across a tree's move between admission replicas: after the move, every
pending workload is listed once, in order, through gRPC and through Kueue's visibility API,
whatever the old owner still writes (docs/events.md, "Visibility across a move")."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
import pytest
from admission_world import (
    Running,
    cluster_queue,
    config_applied,
    eventually,
    fact,
    flavor,
    local_queue,
    msgspec_replace,
    publish,
    start_admission,
    submitted,
    workload,
)
from gateway_helpers import RunningGateway, running_gateway
from nats_hold import Hold
from nats_process import NatsServer

from muster.admission.moves import move_partition
from muster.bus import Bus, BusConfig
from muster.bus.buckets import VISIBILITY_BUCKET
from muster.bus.partitions import partition_of
from muster.contracts.v1 import events_pb2 as pb
from muster.contracts.v1 import services_pb2
from muster.gateway.kube_visibility import Query, query_of, summary
from muster.gateway.visibility import KeyValueStore

pytestmark = pytest.mark.timeout(90)

SHARDS = 2
# Renewals held on the wire leave the old owner's lease at a revision it does not know: not
# given up when it is killed, it is taken again after its TTL.
REPLICA: dict[str, Any] = {"shards": SHARDS, "lease_ttl_s": 10.0}
GROUP = "/apis/visibility.kueue.x-k8s.io/v1beta2"
Rows = list[tuple[str, int, int]]  # (name, position in the ClusterQueue, in the LocalQueue)


def a_tree() -> str:
    """A cohort of the partition shard 0 decides (a stable choice: partitions are crc32s)."""
    return next(f"team-{i}" for i in range(50) if partition_of(f"cohort/team-{i}") % SHARDS == 0)


def arrival(name: str, tree: str, partition: int) -> pb.Envelope:
    """A workload's `submitted`, naming its LocalQueue's partition as the gateway does; two
    LocalQueues take turns so that positions in each differ from those in the ClusterQueue."""
    queue = f"lq-{tree}-{int(name[1:]) % 2}"
    env = submitted(workload(name, queue=queue))
    env.partition = str(partition)
    return env


def expected(names: range) -> Rows:
    per_queue = [0, 0]
    rows = []
    for at, i in enumerate(names):
        rows.append((f"w{i}", at, per_queue[i % 2]))
        per_queue[i % 2] += 1
    return rows


async def grpc_rows(gw: RunningGateway, **query: str) -> tuple[Rows, int]:
    request = services_pb2.PendingWorkloadsRequest(**query, limit=1000)  # type: ignore[arg-type]
    reply = await gw.visibility.PendingWorkloads(request, timeout=10)
    rows = [(w.name, w.position_in_cluster_queue, w.position_in_local_queue) for w in reply.items]
    return rows, reply.total


async def kueue_rows(bus: Bus, path: str) -> Rows:
    """What Kueue's visibility endpoint answers for `path` (the handler its server runs)."""
    query = query_of(f"{GROUP}/{path}/pendingworkloads", {})
    assert isinstance(query, Query)
    answer = await summary(KeyValueStore(await bus.kv(VISIBILITY_BUCKET)), query)
    items: list[dict[str, Any]] = answer.body["items"]
    return [
        (w["metadata"]["name"], w["positionInClusterQueue"], w["positionInLocalQueue"])
        for w in items
    ]


async def listed(
    gw: RunningGateway, bus: Bus, tree: str, rows: Rows, *, timeout_s: float | None = 20
) -> None:
    """Wait until the views list exactly `rows`, through gRPC and Kueue's endpoint alike, at
    most `timeout_s` (None: the test's time); fail naming what they list."""
    queues = [[r for r in rows if int(r[0][1:]) % 2 == n] for n in (0, 1)]
    last: list[object] = []

    async def shows() -> bool:
        try:
            found: list[object] = [await grpc_rows(gw, cluster_queue=f"cq-{tree}")]
        except grpc.aio.AioRpcError as err:  # NOT_FOUND until admission's first write
            if err.code() != grpc.StatusCode.NOT_FOUND:
                raise
            last[:] = [err.details()]
            return False
        found += [await grpc_rows(gw, namespace="ns", local_queue=f"lq-{tree}-{n}") for n in (0, 1)]
        found += [await kueue_rows(bus, f"clusterqueues/cq-{tree}")]
        found += [await kueue_rows(bus, f"namespaces/ns/localqueues/lq-{tree}-{n}") for n in (0, 1)]
        last[:] = found
        return found == [(rows, len(rows)), *((q, len(q)) for q in queues), rows, *queues]

    try:
        await eventually(shows, timeout_s=timeout_s)
    except TimeoutError:
        raise AssertionError(f"the views list {last}, not {rows}") from None


async def test_after_a_move_every_pending_workload_is_listed_once_in_order(
    bus: Bus, bus_config: BusConfig, nats_process: NatsServer
) -> None:
    tree = a_tree()
    partition = partition_of(f"cohort/{tree}")
    await publish(
        bus,
        config_applied(flavor()),
        config_applied(cluster_queue(f"cq-{tree}", cpu="1", cohort=tree)),
        *(config_applied(local_queue(f"lq-{tree}-{n}", cq=f"cq-{tree}")) for n in (0, 1)),
    )
    async with Hold(nats_process) as hold, running_gateway(bus) as gw:
        held = msgspec_replace(bus_config, url=hold.url)
        old: Running = await start_admission(held, **REPLICA, shard=0)
        new = await start_admission(bus_config, **REPLICA, shard=1)
        try:
            await asyncio.gather(old.wait_serving(), new.wait_serving())
            await publish(bus, *(arrival(f"w{i}", tree, partition) for i in range(10)))
            await listed(gw, bus, tree, expected(range(1, 10)), timeout_s=None)  # w0 runs

            # The old owner's next index write stays on the wire until the new owner wrote.
            hold.arm(f"$KV.{VISIBILITY_BUCKET}.pending-index.cq-{tree}".encode())
            await publish(bus, arrival("w10", tree, partition))
            await hold.holding.wait()
            await move_partition(bus, partition, 1)
            await publish(bus, arrival("w11", tree, partition))  # the new owner's alone
            await listed(gw, bus, tree, expected(range(1, 12)))
            hold.release()  # the old owner's write lands; it reads the move, and dies
            await old.kill()
            old = await start_admission(held, **REPLICA, shard=0)
            await listed(gw, bus, tree, expected(range(1, 12)))  # while it restarts
            await old.wait_serving()
            done = fact("finished", "ns/w0")
            done.partition = str(partition)
            await publish(bus, done, arrival("w12", tree, partition))
            await listed(gw, bus, tree, expected(range(2, 13)))  # w1 admitted, w12 last
        finally:
            await old.stop()
            await new.stop()
