"""The watchdog words a stall as what the loop holds (bus/progress.py `Wording`): the watcher's
cluster watch holds batches by revision, not a consumer's messages by sequence (a gateway's
Submits: test_gateway_liveness.py)."""

from __future__ import annotations

import asyncio

import pytest
from test_bus_watchdog import watched

from muster.bus import Bus
from muster.watcher.service import WATCH_BATCHES

pytestmark = pytest.mark.timeout(30)


async def test_a_watch_batch_that_never_ends_is_told_as_a_batch_by_its_revision(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    tracker = bus.progress.track(
        "watcher-watch", stream="", consumer="", max_ack_pending=1, wording=WATCH_BATCHES
    )
    async with watched(bus) as liveness:
        tracker.began(812)  # a batch up to revision 812, whose handling hangs
        await asyncio.wait_for(liveness.dead.wait(), 10)
        tracker.ended(812)
        await asyncio.wait_for(liveness.alive_again.wait(), 10)
    assert "watch watcher-watch stalled: 1 batch waiting" in caplog.text
    assert "(revision 812 in hand)" in caplog.text
    assert "watch watcher-watch moves again" in caplog.text
