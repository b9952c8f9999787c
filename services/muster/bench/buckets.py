"""`muster bench buckets`: what every key-value bucket keeps once workloads are gone.

Each case starts a fresh loopback nats-server and the service processes `muster run` starts
(one admission shard, the simulated cluster), queues N workloads in one ClusterQueue that runs
20 at a time (so its pending list spans pages that split, merge and go), lets every one run
for a second and finish, deletes each through `Gateway.Delete`, waits for the buckets to stop
changing, then counts each bucket's stored messages: live keys, tombstones (deleted keys), and
of those the ones that expire (docs/events.md, "Deleted keys leave"). Run at N and 2N: a
count that grows with N is kept per workload, for as long as the row's last column says.

Two more things come and go meanwhile: N/10 LocalQueues, created with the ClusterQueue and
deleted once the workloads are (a `config_deleted` each, as the watcher publishes a kubectl
delete), which leave `MUSTER_PARTITIONS`; and the heartbeat of a cluster `parted` of PARTED_NODES
nodes, put in parts as gang-permit puts a room over `max_payload` (here PARTED_MAX_BYTES, so
that a few thousand nodes make parts), then of one node, which leaves one value and deletes the
parts (`MUSTER_CLUSTERS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Final

import grpc
import msgspec
from nats.js import JetStreamContext

from muster.bench.e2e import stored_counts
from muster.bench.live import live_stack
from muster.bench.sim_nodes import node_manifests
from muster.bench.table import Column, render_table
from muster.bus import BusConfig, connect, new_event
from muster.bus.buckets import CLUSTERS_BUCKET, SHARDS_BUCKET
from muster.bus.kv import open_bucket
from muster.bus.service import run_loop
from muster.bus.setup import FOLLOWED_TOMBSTONES_KEPT_S
from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc
from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat_parts import encode_room
from muster.gangpermit.room_writer import RoomWriter

SECTION: Final = "buckets"
NAMESPACE: Final = "bench"
PER_CALL: Final = 16
POLL_S: Final = 0.2
QUIET_S: Final = 3.0  # no bucket changed for this long: the services are done with them
_KV: Final = "KV_"
# Written on a clock, never quiet: admission's lease renewals and gang-permit's heartbeats.
_TICKING: Final = frozenset({_KV + SHARDS_BUCKET, _KV + CLUSTERS_BUCKET})
PARTED_NODES: Final = 2_000
PARTED_MAX_BYTES: Final = 64 * 1024
_TOMBSTONES: Final = ("DEL", "PURGE")

_CONFIG: Final = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: "2"}, {name: memory, nominalQuota: 100Gi}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: bench, name: lq}
spec: {clusterQueue: cq}"""

_PASSING_QUEUE: Final = """apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: bench, name: passing-{i}}}
spec: {{clusterQueue: cq}}"""

_WORKLOAD: Final = """apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  namespace: bench
  name: w-{i}
  annotations: {{muster.dev/run-seconds: "1"}}
spec:
  queueName: lq
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers: [{{name: c, resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}}}]
"""


class BucketRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    workloads: int  # run to completion and deleted
    bucket: str
    messages: int  # stored in the bucket's stream
    live: int  # keys with a value
    tombstones: int  # deleted keys' markers
    expiring: int  # of those, with a TTL of their own
    bytes: int
    kinds: str  # live keys per first token ("pod.": 200)


def passing_queues(workloads: int) -> int:
    """How many LocalQueues come and go in a case of `workloads` workloads."""
    return max(1, workloads // 10)


async def _calls(gateway: str, workloads: int, js: JetStreamContext) -> None:
    async with grpc.aio.insecure_channel(gateway) as channel:
        gw = services_pb2_grpc.GatewayStub(channel)
        passing = (_PASSING_QUEUE.format(i=i) for i in range(passing_queues(workloads)))
        config = "\n---\n".join([_CONFIG, *passing])
        await gw.Submit(services_pb2.SubmitRequest(manifest=config))
        for first in range(0, workloads, PER_CALL):
            batch = range(first, min(first + PER_CALL, workloads))
            manifest = "\n---\n".join(_WORKLOAD.format(i=i) for i in batch)
            await gw.Submit(services_pb2.SubmitRequest(manifest=manifest))
        await until_stored(js, "finished", workloads, timeout_s=60 + workloads / 5)
        for i in range(workloads):
            ref = services_pb2.ObjectRef(kind="Workload", namespace=NAMESPACE, name=f"w-{i}")
            await gw.Delete(services_pb2.DeleteRequest(object=ref))
        await until_stored(js, "deleted", workloads, timeout_s=60)


async def _queues_pass(url: str, workloads: int) -> None:
    """The passing LocalQueues deleted, as the watcher tells a kubectl delete."""
    bus = await connect(BusConfig(url=url, name="muster-bench"))
    try:
        for i in range(passing_queues(workloads)):
            deleted = events_pb2.ConfigDeleted(kind="LocalQueue", name=f"{NAMESPACE}/passing-{i}")
            await bus.publish(new_event("config_deleted", deleted, cluster="local", source="bench"))
    finally:
        await bus.close()


async def _room_shrinks(js: JetStreamContext) -> None:
    """Cluster `parted`'s heartbeat in parts, then of one node, put as gang-permit puts it."""
    kv = await open_bucket(js, CLUSTERS_BUCKET)
    writer = RoomWriter("parted", tombstones_kept_s=FOLLOWED_TOMBSTONES_KEPT_S)
    nodes = tuple(
        NodeRoom(
            name=f"parted-{i:05d}",
            labels={"example.com/rack": f"rack-{i // 40}", "example.com/node": f"n-{i}"},
            allocatable={"cpu": 8_000, "pods": 110_000},
            free={"cpu": 8_000 - (i % 8) * 1000, "pods": 110_000},
        )
        for i in range(PARTED_NODES)
    )
    large = encode_room(ClusterCapacity(cluster="parted", nodes=nodes), max_bytes=PARTED_MAX_BYTES)
    await writer.write(kv, large)
    small = ClusterCapacity(cluster="parted", nodes=nodes[:1])
    await writer.write(kv, encode_room(small, max_bytes=PARTED_MAX_BYTES, last=large))


async def until_stored(js: JetStreamContext, event: str, count: int, *, timeout_s: float) -> None:
    """Until `count` events of type `event` are stored; TimeoutError after `timeout_s`."""
    async with asyncio.timeout(timeout_s):
        while (await stored_counts(js)).get(event, 0) < count:  # noqa: ASYNC110 (in the server)
            await asyncio.sleep(POLL_S)


async def _kv_streams(js: JetStreamContext) -> dict[str, int]:
    """Each bucket's stream with its last sequence."""
    return {
        info.config.name: info.state.last_seq
        for info in await js.streams_info()
        if info.config.name and info.config.name.startswith(_KV)
    }


async def until_quiet(js: JetStreamContext, *, timeout_s: float = 60.0) -> None:
    """Until no bucket but the ticking ones was written for QUIET_S (or `timeout_s`: counted
    as it stands)."""

    async def written() -> dict[str, int]:
        return {name: seq for name, seq in (await _kv_streams(js)).items() if name not in _TICKING}

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            last, since = await written(), time.monotonic()
            while time.monotonic() - since < QUIET_S:
                await asyncio.sleep(POLL_S)
                now = await written()
                if now != last:
                    last, since = now, time.monotonic()


async def census(js: JetStreamContext, stream: str, workloads: int) -> BucketRow:
    """What bucket stream `stream` holds: each key's last message read for its headers."""
    info = await js.stream_info(stream, subjects_filter=">")
    tombstones = expiring = 0
    kinds: dict[str, int] = {}
    for subject in info.state.subjects or {}:
        msg = await js.get_last_msg(stream, subject)
        headers = msg.headers or {}
        if headers.get("KV-Operation") in _TOMBSTONES:
            tombstones += 1
            expiring += "Nats-TTL" in headers
        else:
            kind = subject.split(".")[2]  # $KV.<bucket>.<first token>
            kinds[kind] = kinds.get(kind, 0) + 1
    subjects = len(info.state.subjects or {})
    return BucketRow(
        workloads=workloads,
        bucket=stream.removeprefix(_KV),
        messages=info.state.messages,
        live=subjects - tombstones,
        tombstones=tombstones,
        expiring=expiring,
        bytes=info.state.bytes,
        kinds=" ".join(f"{k}:{n}" for k, n in sorted(kinds.items())),
    )


async def run_case(workloads: int) -> list[BucketRow]:
    nodes = node_manifests(1, cpu=64, memory="256Gi", pods=250, digits=3)
    async with live_stack(prefix="muster-bench-buckets-", nodes=nodes) as live:
        await _calls(live.stack.gateway_address, workloads, live.js)
        await _queues_pass(live.url, workloads)
        await _room_shrinks(live.js)
        await until_quiet(live.js)
        return [await census(live.js, s, workloads) for s in sorted(await _kv_streams(live.js))]


def run(*, scale: float) -> Iterator[BucketRow]:
    """The census after N, then 2N workloads (N = 200 at scale 1)."""
    count = max(10, round(200 * scale))
    for workloads in (count, 2 * count):
        yield from run_loop(run_case(workloads))


def render(rows: list[msgspec.Struct]) -> str:
    columns: list[Column[BucketRow]] = [
        Column("workloads", lambda r: str(r.workloads)),
        Column("bucket", lambda r: r.bucket, numeric=False),
        Column("messages", lambda r: str(r.messages)),
        Column("live keys", lambda r: str(r.live)),
        Column("tombstones", lambda r: str(r.tombstones)),
        Column("expiring", lambda r: str(r.expiring)),
        Column("bytes", lambda r: str(r.bytes)),
        Column("live keys by first token", lambda r: r.kinds, numeric=False),
    ]
    return render_table(columns, [r for r in rows if isinstance(r, BucketRow)])
