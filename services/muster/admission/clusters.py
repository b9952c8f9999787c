"""The cluster registry: every cluster's gang-permit heartbeat, from the `MUSTER_CLUSTERS` bucket.

Key `<cluster>`, value a `muster.core.dispatch.ClusterCapacity` as JSON (each schedulable node's
free room, and the Kueue workloads it already counts), put every few seconds by that cluster's
gang-permit. `follow_clusters` feeds each one to the replica's `Dispatcher` with the time it
arrived (admission's clock: a cluster silent for longer than `--cluster-lost-seconds` is lost),
and runs a round when a workload waits for room, since the new room may let it go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import msgspec
import nats.errors
import nats.js.errors

from muster.admission.dispatch import Dispatcher
from muster.bus import Bus
from muster.bus.cancel import raise_if_cancelling
from muster.contracts.v1 import events_pb2 as pb
from muster.core.dispatch import ClusterCapacity

CLUSTERS_BUCKET: Final = "MUSTER_CLUSTERS"
_RETRY_S = 1.0
_DELETED = ("DEL", "PURGE")

log = logging.getLogger(__name__)

Round = Callable[[Sequence[pb.Envelope]], Awaitable[object]]


async def follow_clusters(
    bus: Bus, dispatcher: Dispatcher, run_round: Round, *, clock: Callable[[], float]
) -> None:
    """Feed every heartbeat to `dispatcher` until cancelled; `run_round([])` runs a round."""
    while True:
        raise_if_cancelling()
        try:
            kv = await bus.kv(CLUSTERS_BUCKET)
            watcher = await kv.watchall()
            try:
                # Setting up the watch may have swallowed a cancellation (bus/cancel.py), and
                # with no heartbeat coming the loop below would never look again.
                raise_if_cancelling()
                async for entry in watcher:
                    if entry is None:  # caught up with the stored values
                        continue
                    if entry.operation in _DELETED:
                        dispatcher.forget_cluster(entry.key)
                        continue
                    try:
                        capacity = msgspec.json.decode(entry.value or b"", type=ClusterCapacity)
                    except msgspec.DecodeError as exc:
                        log.warning("bad heartbeat of %s: %s", entry.key, exc)
                        continue
                    dispatcher.heartbeat(capacity, now_s=clock())
                    if dispatcher.wants_round():
                        await run_round([])
            finally:
                await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves it unannotated
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as exc:
            log.warning("cluster registry watch failed, again in %gs: %r", _RETRY_S, exc)
        await asyncio.sleep(_RETRY_S)
