"""The cluster registry: every cluster's gang-permit heartbeat, from the `MUSTER_CLUSTERS` bucket.

Key `<cluster>`, value a `muster.core.dispatch.ClusterCapacity` as JSON (each schedulable node's
free room, and the Kueue workloads it already counts; a large cluster's in parts, keys
`<cluster>.part.<n>`, taken once whole: `muster.core.heartbeat_parts`), put every few seconds
by that cluster's gang-permit, and up to ten times a second while its passes run.
`follow_clusters` feeds each one to the replica's `Dispatcher` with the time it arrived
(admission's clock: a cluster silent for longer than `--cluster-lost-seconds` is lost), and runs
a round when a workload waits for room, since the new room may let it go.

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
from muster.bus.kv import follow_bucket
from muster.contracts.v1 import events_pb2 as pb
from muster.core.heartbeat_parts import Gone, RoomReader

WANTED_S: Final = 1.0  # how often a replica not following the registry looks whether it must

log = logging.getLogger(__name__)

Round = Callable[[Sequence[pb.Envelope]], Awaitable[object]]


async def follow_clusters(
    bus: Bus,
    dispatcher: Dispatcher,
    run_round: Round,
    *,
    clock: Callable[[], float],
    wanted_s: float = WANTED_S,
) -> None:
    """Feed every heartbeat to `dispatcher` until cancelled, once it declares a worker cluster;
    `run_round([])` runs a round."""

    loaded = False  # the stored heartbeats are all in
    reader = RoomReader()

    async def heard(key: str, value: bytes | None) -> None:
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
            await run_round([])

    async def all_in() -> None:
        nonlocal loaded
        loaded = True
        if dispatcher.wants_round():
            await run_round([])

    while not dispatcher.declared:
        raise_if_cancelling()
        await asyncio.sleep(wanted_s)
    log.info("following %s: worker clusters declared", CLUSTERS_BUCKET)
    await follow_bucket(bus.kv, CLUSTERS_BUCKET, heard, on_loaded=all_in)
