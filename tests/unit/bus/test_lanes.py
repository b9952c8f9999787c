"""`Lane`: the consume loop's queue between its pull and one lane task."""

from __future__ import annotations

import asyncio

import pytest

from muster.bus.lanes import Lane

pytestmark = pytest.mark.timeout(5)


async def test_a_waiting_reader_gets_items_in_the_order_put() -> None:
    lane: Lane[int] = Lane()
    reader = asyncio.create_task(lane.get())
    await asyncio.sleep(0)  # the reader now waits on the empty lane
    lane.put(1)
    lane.put(2)
    lane.put(3)
    assert await reader == 1
    assert [await lane.get(), await lane.get()] == [2, 3]
    assert len(lane) == 0


async def test_a_second_reader_is_refused() -> None:
    lane: Lane[int] = Lane()
    first = asyncio.create_task(lane.get())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="one reader"):
        await lane.get()
    lane.put(7)
    assert await first == 7


async def test_a_cancelled_reader_leaves_the_lane_usable() -> None:
    lane: Lane[int] = Lane()
    first = asyncio.create_task(lane.get())
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    lane.put(5)
    assert await lane.get() == 5
