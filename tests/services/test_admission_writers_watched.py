"""Admission's snapshot and visibility writers are judged for stalls (bus/pulse.py), against a
real nats-server: a write that hangs makes liveness NOT_SERVING with one line naming its
timer, and it ticks again once the write goes on."""

from __future__ import annotations

import asyncio
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
    caplog: pytest.LogCaptureFixture,
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
    replica = await start_admission(bus_config, snapshot_s=0.2)
    try:
        await replica.wait_serving()
        async with watched(replica.bus) as liveness:
            await basic_config(bus)  # something to write
            await asyncio.wait_for(hanging.wait(), 20)
            await asyncio.wait_for(liveness.dead.wait(), 20)
            answer.set()
            await asyncio.wait_for(liveness.alive_again.wait(), 20)
    finally:
        answer.set()
        await replica.stop()
    assert f"timer {timer} stalled: no tick for" in caplog.text
    assert f"timer {timer} ticks again" in caplog.text
