"""The test helper `EventLog.wait_for_next`: each stored message once, told apart by stream
sequence, even when an event id is stored twice (published again past the duplicate window)."""

from __future__ import annotations

import asyncio

import pytest
from bus_helpers import EventLog, pending, submitted

from muster.contracts.v1.events_pb2 import Envelope

pytestmark = pytest.mark.timeout(10)


def stored(env: Envelope, sequence: int) -> Envelope:
    """`env` as the log sees it from the stream: a copy with its sequence set."""
    copy = Envelope()
    copy.CopyFrom(env)
    copy.sequence = sequence
    return copy


async def test_each_stored_message_is_returned_once_when_an_id_is_stored_twice() -> None:
    log = EventLog()
    first, again = pending("ml/a", "1 more needed"), pending("ml/a", "2 more needed")
    for sequence, env in enumerate([submitted("ml/a"), first, again, first], start=1):
        await log.add(stored(env, sequence))  # `first` stored twice: sequences 2 and 4

    chain = [await log.wait_for("pending", workload="ml/a")]
    for _ in range(2):
        chain.append(await log.wait_for_next("pending", after=chain[-1], timeout_s=0.1))

    assert [(e.sequence, e.pending.message) for e in chain] == [
        (2, "1 more needed"),
        (3, "2 more needed"),
        (4, "1 more needed"),
    ]
    with pytest.raises(pytest.fail.Exception, match="no pending for ml/a after"):
        await log.wait_for_next("pending", after=chain[-1], timeout_s=0.05)


async def test_waits_for_a_message_stored_later() -> None:
    log = EventLog()
    await log.add(stored(submitted("ml/a"), 1))
    waiting = asyncio.create_task(log.wait_for_next("pending", after=log.seen[0], timeout_s=5))
    await log.add(stored(pending("ml/b", "another workload's"), 2))
    await log.add(stored(pending("ml/a", "1 more needed"), 3))

    assert (await waiting).sequence == 3


async def test_an_envelope_as_the_test_published_it_is_found_by_its_id() -> None:
    log = EventLog()
    published = submitted("ml/a")  # no sequence: the stream's copy is found by its id
    waiting = asyncio.create_task(log.wait_for_next("pending", after=published, timeout_s=5))
    await log.add(stored(pending("ml/a", "before it"), 1))
    await log.add(stored(published, 2))
    await log.add(stored(pending("ml/a", "after it"), 3))

    assert (await waiting).pending.message == "after it"
