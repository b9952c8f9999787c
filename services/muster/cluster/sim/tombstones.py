"""Pod tombstones of a simulated cluster leave once no reader can need them (task longrun).

A delete leaves a tombstone carrying the pod's last state (`store.py`): what a watch resumed
from before the deletion shows as DELETED. Kept for good, they grew by one per pod ever deleted
(about 1.1 KB each). Who resumes a watch of `MUSTER_SIM_<c>` from a revision, and so reads one:
- the cluster's watcher, after a restart, from the revision it stored in `MUSTER_WATCHER`
  (key `<c>`, a decimal): a tombstone at or below it was read before the restart;
- gangpermit's cache (and the chaos bench) after a failed watch, from the last revision they
  saw, retried within seconds;
- nothing else: the kubelet, the collector and a starting gangpermit list first.
So a tombstone goes once the watcher has read it (at or below its stored revision) and it is
older than `kept_s` (an hour by default: far past any retry of a failed watch). With no
revision stored (no watcher ran yet), or one not a number, none goes. A reader resuming later
than that from below the pruned revisions (key `pruned`) is told its revision expired, as a
Kubernetes watch gets 410 Gone, and lists again (task evictretry).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final, NoReturn

from muster.bus.errors import BusError
from muster.bus.kv import Bucket
from muster.cluster.sim.store import PRUNED_KEY, revision_in

log = logging.getLogger(__name__)

TOMBSTONES_KEPT_S: Final = 3600.0
PRUNE_EVERY_S: Final = 600.0  # each pass reads the whole bucket: not more often,
PRUNE_EVERY_MIN_S: Final = 10.0  # unless tombstones are kept less long, down to this


def prune_every_s(kept_s: float) -> float:
    """How often to prune tombstones kept `kept_s`: a tenth of that, within the bounds."""
    return min(PRUNE_EVERY_S, max(kept_s / 10, PRUNE_EVERY_MIN_S))


def watcher_read_up_to(value: bytes | None) -> int:
    """The revision a watcher's stored resume point says it handled (0: none, or unreadable)."""
    return revision_in(value)


async def prune_once(pods: Bucket, watcher: Bucket, cluster: str, *, kept_s: float) -> int:
    """Remove the tombstones of `pods` the watcher of `cluster` has read and older than
    `kept_s`; how many."""
    entry = await watcher.get(cluster)
    read = watcher_read_up_to(None if entry is None else entry.value)
    if entry is not None and not read and entry.value:
        log.warning("%s: watcher resume point %r is no revision: no tombstone pruned",
                    cluster, entry.value[:32])  # fmt: skip
    if not read:
        return 0
    pruned = await pods.forget_deleted(older_than_s=kept_s, up_to_revision=read)
    if pruned:
        # Every tombstone pruned is at or below `read`: a watch resumed below it may have
        # missed a deletion, and is told so (`SimStore.watch` raises ExpiredError).
        await pods.put(PRUNED_KEY, str(read).encode())
    return pruned


async def prune_forever(
    pods: Bucket,
    watcher: Bucket,
    cluster: str,
    *,
    kept_s: float = TOMBSTONES_KEPT_S,
    every_s: float | None = None,
) -> NoReturn:
    """`prune_once` every `every_s` (None: `prune_every_s(kept_s)`); a NATS failure is
    logged and tried again next time."""
    every_s = prune_every_s(kept_s) if every_s is None else every_s
    while True:
        try:
            pruned = await prune_once(pods, watcher, cluster, kept_s=kept_s)
        except BusError as exc:
            log.warning("%s: pruning pod tombstones failed, trying again later: %s", cluster, exc)
        else:
            if pruned:
                log.info("%s: %d pod tombstones pruned", cluster, pruned)
        await asyncio.sleep(every_s)
