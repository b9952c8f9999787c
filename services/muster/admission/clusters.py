"""The cluster registry: every cluster's gang-permit heartbeat, from the `MUSTER_CLUSTERS` bucket.

Key `<cluster>`, value a `muster.core.dispatch.ClusterCapacity` as JSON (each schedulable node's
free room, and the Kueue workloads it already counts; a large cluster's in parts, keys
`<cluster>.part.<n>`, taken once whole: `muster.core.heartbeat_parts`), put every few seconds
by that cluster's gang-permit, and up to ten times a second while its passes run.
`follow_clusters` feeds each one to the replica's `Dispatcher` with the time it arrived
(admission's clock: a cluster silent for longer than `--cluster-lost-seconds` is lost), and runs
a round when a workload waits for room, since the new room may let it go: one round for the
heartbeats heard while the last ran, and at most one each ROUND_GAP_S. A round per heartbeat,
heard only once the round before ended, let a worker that reports every millisecond (a
hostile or broken gang-permit) keep admission busy with rounds for every cluster, and made
every cluster's heartbeat wait behind them (a healthy one could be taken for lost). Each
cluster's heartbeat is decoded at most once each HEARTBEAT_GAP_S, the latest kept
(`muster.bus.heartbeats.PacedHeartbeats`, as the watcher's MultiKueueCluster status reads
them): a worker putting a large room a thousand times a second cost a decode per put. One
larger than `--heartbeat-max-bytes` is refused as a bad one (`RoomReader`).

Only MultiKueue reads the registry, and only for the clusters its MultiKueueClusters declare, so
a replica follows the bucket only once one is declared (looked at every `WANTED_S`): without
MultiKueue (one cluster), each heartbeat would be a delivery to read and a body to decode per
replica, ten a second under load, whatever share of the work the replica has. Once followed,
the bucket's stored values come first, as at a replica's start, and no round runs for them
until they are all in: a round on the first one heard would dispatch a waiting workload there
while a cluster listed before it, with room, is not heard yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import msgspec

from muster.admission.dispatch import Dispatcher
from muster.bus import Bus
from muster.bus.buckets import CLUSTERS_BUCKET
from muster.bus.cancel import raise_if_cancelling
from muster.bus.heartbeats import PacedHeartbeats
from muster.bus.kv import follow_bucket
from muster.bus.supervision import supervised
from muster.contracts.v1 import events_pb2 as pb
from muster.core.heartbeat_pace import HEARTBEAT_GAP_S
from muster.core.heartbeat_parts import HEARTBEAT_MAX_BYTES, Gone, RoomReader

WANTED_S: Final = 1.0  # how often a replica not following the registry looks whether it must
ROUND_GAP_S: Final = 0.1  # rounds asked by heartbeats: ten a second at most, as a gang-permit beats

log = logging.getLogger(__name__)

Round = Callable[[Sequence[pb.Envelope]], Awaitable[object]]


async def follow_clusters(
    bus: Bus,
    dispatcher: Dispatcher,
    run_round: Round,
    *,
    clock: Callable[[], float],
    wanted_s: float = WANTED_S,
    gap_s: float = ROUND_GAP_S,
    heartbeat_gap_s: float = HEARTBEAT_GAP_S,
    max_bytes: int = HEARTBEAT_MAX_BYTES,
) -> None:
    """Feed every heartbeat to `dispatcher` until cancelled, once it declares a worker cluster,
    each cluster's at most once each `heartbeat_gap_s` (`muster.core.heartbeat_pace`);
    `run_round([])` runs a round (at most one each `gap_s` for heartbeats)."""

    loaded = False  # the stored heartbeats are all in
    reader = RoomReader(max_bytes=max_bytes)  # a larger heartbeat is refused as a bad one
    asked = asyncio.Event()  # a heartbeat may let a waiting workload go: a round is due

    async def rounds() -> None:
        while True:
            await asked.wait()
            asked.clear()
            await run_round([])
            await asyncio.sleep(gap_s)

    def take(key: str, value: bytes | None) -> None:
        try:
            found = reader.heard(key, value)
        except msgspec.DecodeError as exc:
            log.warning("bad heartbeat %s: %s", key, exc)
            return
        if isinstance(found, Gone):
            dispatcher.forget_cluster(found.cluster)
            return
        if found is None:  # a part, or a head whose parts are not all in yet
            return
        dispatcher.heartbeat(found, now_s=clock())
        if loaded and dispatcher.wants_round():
            asked.set()

    def all_in() -> None:
        nonlocal loaded
        loaded = True
        if dispatcher.wants_round():
            asked.set()

    while not dispatcher.declared:
        raise_if_cancelling()
        await asyncio.sleep(wanted_s)
    log.info("following %s: worker clusters declared", CLUSTERS_BUCKET)
    # The rounds run here, so that a Reown they raise ends this loop as itself; the bucket is
    # read beside them, never waiting for one.
    paced = PacedHeartbeats(take, gap_s=heartbeat_gap_s)
    registry = supervised(
        follow_bucket(bus.kv, CLUSTERS_BUCKET, paced.heard, on_loaded=all_in),
        name="admission-cluster-registry",
    )
    try:
        await rounds()
    finally:
        paced.close()
        registry.cancel()
        await asyncio.gather(registry, return_exceptions=True)
