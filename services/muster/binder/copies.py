"""The binder's collector of stale copies: what MultiKueue created in this (worker) cluster for
workloads of other clusters, deleted once they finished, were deleted, or were evicted here
(moved to another worker, or this one was lost), as Kueue's MultiKueue garbage-collects
remote objects by their origin label.

An eviction's `cmd.evict` deletes the copy in the usual course; the collector is what catches
the rest: a copy whose workload finished here (its Job is Complete: Kueue deletes it too), was
deleted in its own cluster, or whose eviction command never arrived. It sweeps when such an
event arrives (`wake`), every `interval_s`, and once the cluster answers again after an
absence. A sweep lists the copies, then brings the binder's view up to the stream's end before
judging, so a copy made for an admission newer than the view is never taken for a stale one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Protocol

from muster.binder.fences import Fences
from muster.binder.handlers import WorkloadSpecs
from muster.bus.cancel import raise_if_cancelling
from muster.bus.pulse import Pulse
from muster.cluster.backend import WorkloadCopy
from muster.cluster.errors import ClusterError

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 30.0
_SETTLE_S = 0.2  # events arriving together make one sweep


class CopyCluster(Protocol):
    """What the collector needs of the cluster (`KubeBackend`)."""

    async def copies_of(self, origins: Collection[str]) -> list[WorkloadCopy]: ...

    async def stop_workload(self, workload_key: str) -> None: ...

    async def probe(self) -> ClusterError | None: ...


async def collect_copies(
    cluster: CopyCluster,
    specs: WorkloadSpecs,
    fences: Fences,
    *,
    own_cluster: str,
    catch_up: Callable[[], Awaitable[None]],
    wake: asyncio.Event,
    pulse: Pulse,
    interval_s: float = SWEEP_INTERVAL_S,
) -> None:
    """Delete stale copies until cancelled. `catch_up()` applies to `specs` every event of
    the stream up to its end (the binder's spec replay, bounded). `pulse` beats at each
    sweep (one that hangs is a stall: bus/pulse.py)."""
    while True:
        raise_if_cancelling()  # wait_for may have swallowed it (bus.cancel)
        pulse.beat(interval_s + _SETTLE_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), interval_s)
        await asyncio.sleep(_SETTLE_S)
        wake.clear()
        try:
            with pulse.handling():  # a call retrying against the API server advances it
                removed = await sweep(
                    cluster, specs, fences, own_cluster=own_cluster, catch_up=catch_up
                )
        except ClusterError as err:
            log.warning("stale copies not collected in %s: %s", own_cluster, err)
            continue
        for copy in removed:
            log.info(
                "deleted the stale copy of %s (from cluster %s)",
                copy.workload,
                copy.origin,
                extra={"workload": copy.workload, "cluster": own_cluster},
            )


async def sweep(
    cluster: CopyCluster,
    specs: WorkloadSpecs,
    fences: Fences,
    *,
    own_cluster: str,
    catch_up: Callable[[], Awaitable[None]],
) -> list[WorkloadCopy]:
    """One pass: the stale copies found, each deleted with its pods. Nothing when the cluster
    does not answer (the next pass tries again)."""
    if await cluster.probe():
        return []
    found = await cluster.copies_of(specs.origins - {own_cluster})
    if not found:
        return []
    await catch_up()  # every admission of a copy listed is in the stream by now
    stale = [c for c in found if is_stale(c.workload, specs, fences)]
    for copy in stale:
        await cluster.stop_workload(copy.workload)
    return stale


def is_stale(workload: str, specs: WorkloadSpecs, fences: Fences) -> bool:
    """Whether a copy of `workload` here is known to be stale: its fence (an eviction here,
    its finish or deletion) is newer than its last admission here. A workload this binder
    knows nothing of is not (it may predate what it replayed)."""
    return fences.fence_of(workload) > specs.admitted_at(workload)
