"""The watcher remembers where each workload's events went (`WatcherContext.homes`) only while
it may still publish about it: on the sim cluster, until its last pod is gone (task longrun:
before, one entry per workload ever run, for as long as the watcher ran)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from test_watcher_batch import Marks, Poison
from watcher_pods import Stream, changed, pod

from muster.api.wellknown import PARTITION_ANNOTATION
from muster.bus.poison import Quarantine
from muster.cluster import ClusterChange
from muster.watcher.handlers import WatcherContext
from muster.watcher.outbox import Outbox
from muster.watcher.service import _handle_batch

pytestmark = pytest.mark.timeout(10)


def started_pod(of: str, phase: str) -> Any:
    """The one pod of workload ns/`of` as the binder starts it: with its admission partition."""
    obj = pod(0, phase, of=of, node="n1")
    obj["metadata"]["annotations"] = {PARTITION_ANNOTATION: "p-1"}
    return obj


def life(of: str) -> list[list[ClusterChange]]:
    """Bound, running, succeeded, then deleted (the sim's collector, after its `deleted`)."""
    return [
        [changed(started_pod(of, "Pending"))],
        [changed(started_pod(of, "Running"))],
        [changed(started_pod(of, "Succeeded"))],
        [changed(started_pod(of, "Succeeded"), deleted=True)],
    ]


async def run(ctx: WatcherContext, batches: list[list[ClusterChange]]) -> None:
    for batch in batches:
        await _handle_batch(batch, ctx, cast(Quarantine, Poison()), groups=None, events=None)
        await ctx.outbox.flush()


async def test_homes_hold_only_the_workloads_whose_pods_are_still_there() -> None:
    stream = Stream()
    ctx = WatcherContext(cluster="local", outbox=Outbox(stream), marks=Marks())
    for i in range(50):
        await run(ctx, life(f"done-{i}"))
    await run(ctx, life("alive")[:2])  # running

    assert set(ctx.homes) == {"ns/alive"}  # on main: 51, one per workload ever run
    told = {(e.workload, e.type): e.partition for e in stream.stored}
    assert told[("ns/done-0", "workload.finished")] == "p-1"
    assert told[("ns/alive", "workload.running")] == "p-1"


async def test_a_workload_run_again_under_its_name_still_goes_to_its_partition() -> None:
    stream = Stream()
    ctx = WatcherContext(cluster="local", outbox=Outbox(stream), marks=Marks())
    await run(ctx, life("again"))
    again = [
        [
            changed(
                {
                    **started_pod("again", "Running"),
                    "metadata": {
                        **started_pod("again", "Running")["metadata"],
                        "uid": "uid-again-2",
                    },
                }
            )
        ]
    ]
    await run(ctx, again)
    assert [(e.type, e.partition) for e in stream.stored][-1] == ("workload.running", "p-1")
