"""A `submitted` stored on one name's subject whose envelope names another workload, as a
compromised gateway credential could store it (NATS checks who publishes on a subject, never
what the envelope says): it holds neither name. A gateway claiming names by its `submitted`
alone (`--name-claims submitted`) stores the name's Submit fenced past it, and readers pass it
over (`decode_stored`), so it can neither block a name nor submit a workload under it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from gateway_helpers import RunningGateway, running_gateway
from test_gateway_one_write_claims import stored
from test_gateway_submit_race import outcome, submit, workload

from muster.bus import Bus
from muster.bus.envelope import encode
from muster.bus.partitions import QueuePartitions
from muster.bus.subjects import name_filter, name_key, subject_of
from muster.gateway.submit import envelopes, plan_submit

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def gateway(bus: Bus) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus, name_claims="submitted") as gw:
        yield gw


async def forge(bus: Bus, *, claims: str, names: str) -> tuple[int, str]:
    """Store a `submitted` of `ml/<names>` on the name subject of `ml/<claims>`; its sequence
    and event id."""
    (planned,) = plan_submit(workload(names), cluster="local", submission="forger")
    (env,) = envelopes([planned], cluster="local", partition_of=QueuePartitions().of)
    subject = f"{subject_of(env)}.{name_key(f'ml/{claims}')}"
    return (await bus.js.publish(subject, encode(env))).seq, env.event_id


async def test_a_named_submitted_naming_another_workload_holds_neither_name(
    gateway: RunningGateway, bus: Bus
) -> None:
    await submit(gateway, workload("warm"), "warm")  # the gateway's index read to its end
    forged, forged_id = await forge(bus, claims="victim", names="other")
    last = await bus.last_stored(name_filter("ml/victim"))
    assert last is not None
    assert (last.sequence, last.envelope) == (forged, None)  # read as poison, holding nothing

    assert outcome(await submit(gateway, workload("victim"), "v")) == "submitted"
    assert outcome(await submit(gateway, workload("other"), "o")) == "submitted"
    assert outcome(await submit(gateway, workload("victim"), "rival")) == "exists"

    assert len(await stored(bus, "ml/victim")) == 1
    [(_, other)] = await stored(bus, "ml/other")
    assert other != forged_id  # the forged one never read as `other`'s
