"""Requeued's words once a reactivated workload is queued again (task checks2). Kueue's workload
controller (ff69552e79, its active branch) first waits for requeueAt, which a Retry told while
the workload was inactive sets again once it is active (NeedsRequeueAtUpdate); then it words
Requeued True by the False reason it finds: `Reactivated` after `Deactivated`, `BackoffFinished`
after a PodsReady timeout (the deactivation found the workload evicted already, so the reason
stayed). Until then Requeued stays False. The live replica's engine and the watcher's Workload
status, reading one stored stream, say the same; the `requeued` events are as before."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from admission_stream import applied, reported
from test_admission_reactivated_retry import END_S, REACTIVATED_S, RETRY_S, reactivated
from test_admission_requeue_overlap import (
    CHECK,
    KEY,
    REQUEUING,
    WORKLOAD,
    World,
    admitted,
    check,
)

from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.kueue_status.book import StatusBook

# Stopped while running (its pods not ready yet: the timeout is at 15.5), its pods gone at 13.
STOPPED_S, GONE_S = 12.0, 13.0


# An AdmissionCheck the configuration has, which the ClusterQueue does not name.
OTHER = CHECK | {"metadata": {"name": "other"}}


async def stopped_running(*, told: str | None = "prov") -> World:
    """`w` admitted at 10.5, stopped at 12 (evicted, Deactivated), its pods gone at 13; the
    check `told` (if any; prov, or other) says Retry at 21 s (requeueAfterSeconds 60 s);
    resumed at 30 s."""
    world = await admitted()
    world.stream.put(applied(OTHER))
    stop = pb.WorkloadActiveChanged(active=False)
    await world.at(STOPPED_S, reported("active_changed", KEY, stop, at_s=STOPPED_S))
    envelopes = map(world.stream.envelope, range(1, world.stream.last + 1))
    (evicted,) = [e for e in envelopes if e.evicted.reason]
    done = pb.EvictionCompleted(eviction_id=evicted.event_id)
    await world.at(GONE_S, reported("eviction_completed", KEY, done, at_s=GONE_S))
    if told is not None:
        retry = check("Retry", after_s=int(END_S - RETRY_S), since_s=RETRY_S, name=told)
        await world.at(RETRY_S, reported("admission_check", KEY, retry, at_s=RETRY_S))
    resume = pb.WorkloadActiveChanged(active=True)
    await world.at(REACTIVATED_S, reported("active_changed", KEY, resume, at_s=REACTIVATED_S))
    return world


def requeued(world: World) -> tuple[tuple[str, str], tuple[str, str]]:
    """Requeued's (status, reason) as the engine says it, and as the watcher writes it."""
    said = world.replica.state.engine.records[KEY].conditions["Requeued"]
    book = StatusBook(pods_ready=True, requeuing=REQUEUING)
    for seq in range(1, world.stream.last + 1):
        book.apply(world.stream.envelope(seq))
    written = {c["type"]: c for c in (book.status_of(WORKLOAD) or {})["conditions"]}
    return (said.status, said.reason), (
        written["Requeued"]["status"],
        written["Requeued"]["reason"],
    )


@pytest.mark.parametrize(
    ("setup", "held", "queued"),
    [
        (stopped_running, "Deactivated", "Reactivated"),
        (reactivated, "PodsReadyTimeout", "BackoffFinished"),
    ],
    ids=["stopped-while-running", "stopped-while-backing-off"],
)
async def test_requeued_stays_false_while_held_then_says_what_kueue_says_at_its_end(
    setup: Callable[[], Awaitable[World]], held: str, queued: str
) -> None:
    world = await setup()
    assert world.replica.state.engine.phase(KEY) == "Backoff"
    assert requeued(world) == (("False", held), ("False", held))
    await world.at(END_S - 0.5)
    assert requeued(world) == (("False", held), ("False", held))
    await world.at(END_S)
    assert world.requeued()[-2:] == [(REACTIVATED_S, "Reactivated"), (END_S, "BackoffFinished")]
    assert requeued(world) == (("True", queued), ("True", queued))


async def test_reactivated_with_nothing_holding_it_says_reactivated_at_once() -> None:
    world = await stopped_running(told=None)
    assert world.replica.state.engine.phase(KEY) == "QuotaReserved"  # prov was reset: Pending
    assert requeued(world) == (("True", "Reactivated"), ("True", "Reactivated"))
