"""The gateway's Submits are in the watchdog's hands (bus/watchdog.py), against a real
nats-server: a Submit whose publish hangs makes liveness NOT_SERVING, and it is SERVING again
once the Submit answers; Submits that answer, and an idle gateway, are no stall."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from gateway_helpers import running_gateway
from test_bus_watchdog import watched
from test_gateway_submit_race import outcome, submit, workload

from muster.bus import Bus
from muster.contracts.v1 import events_pb2
from muster.gateway.service import track_submits

pytestmark = pytest.mark.timeout(30)


async def test_a_submit_whose_publish_hangs_is_a_stall_until_it_answers(
    bus: Bus, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    submits = track_submits(bus)
    async with running_gateway(bus, submits=submits) as gw, watched(bus) as liveness:
        assert outcome(await submit(gw, workload("quick"), "quick")) == "submitted"
        publish, answer = bus.publish, asyncio.Event()

        async def hangs(env: events_pb2.Envelope, **kwargs: Any) -> int:
            await answer.wait()  # NATS taking the message and never answering
            return await publish(env, **kwargs)

        monkeypatch.setattr(bus, "publish", hangs)
        hung = asyncio.create_task(submit(gw, workload("hung"), "hung"))
        await asyncio.wait_for(liveness.dead.wait(), 10)
        answer.set()
        assert outcome(await hung) == "submitted"
        await asyncio.wait_for(liveness.alive_again.wait(), 10)
    assert liveness.told == [True, False, True]
    assert "Submits gateway-submit stalled: 1 Submit waiting" in caplog.text
    assert "Submits gateway-submit answer again" in caplog.text
