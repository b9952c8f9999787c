"""Admission's snapshot and visibility writers are judged for stalls (bus/pulse.py), against a
real nats-server: a write that hangs makes liveness NOT_SERVING with one line naming its
timer, and it ticks again once the write goes on."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from admission_world import basic_config, start_admission
from test_bus_watchdog import watched

from muster.admission.rebuild import SnapshotStore
from muster.admission.visibility_writer import VisibilityWriter
from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("timer", "owner", "method"),
    [
        ("admission-visibility", VisibilityWriter, "write"),
        ("admission-snapshots", SnapshotStore, "put"),
    ],
)
async def test_a_writer_whose_write_hangs_is_a_stall_until_it_goes_on(
    bus: Bus,
    bus_config: BusConfig,
    monkeypatch: pytest.MonkeyPatch,
    timer: str,
    owner: type,
    method: str,
) -> None:
    write, hanging, answer = getattr(owner, method), asyncio.Event(), asyncio.Event()

    async def hangs(self: object, *args: Any, **kwargs: Any) -> Any:
        hanging.set()
        await answer.wait()  # NATS taking the write and never answering
        return await write(self, *args, **kwargs)

    monkeypatch.setattr(owner, method, hangs)
    # Its own lines, not liveness: under load another timer may be told late as well.
    stalled, again = Told(f"timer {timer} stalled: no tick for"), Told(f"timer {timer} ticks again")
    replica = await start_admission(bus_config, snapshot_s=0.2)
    try:
        await replica.wait_serving()
        async with watched(replica.bus) as liveness:
            await basic_config(bus)  # something to write
            await asyncio.wait_for(hanging.wait(), 20)
            await asyncio.wait_for(stalled.seen.wait(), 20)
            assert liveness.told[-1] is False
            answer.set()
            await asyncio.wait_for(again.seen.wait(), 20)
    finally:
        answer.set()
        await replica.stop()
        stalled.close()
        again.close()


class Told(logging.Handler):
    """Sets `seen` once the watchdog logs a line holding `line`."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line
        self.seen = asyncio.Event()
        self._logger = logging.getLogger("muster.bus.watchdog")
        self._logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if self.line in record.getMessage():
            self.seen.set()

    def close(self) -> None:
        self._logger.removeHandler(self)
        super().close()
