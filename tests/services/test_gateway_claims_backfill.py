"""After an upgrade, `muster nats-setup` claims the names live from before the claims: a stream
holding `submitted` events and no claim, set up, then a second Submit of a live name through a
gateway whose index cannot read the stream is refused, where before it was stored and told
"submitted". A claim a gateway wrote meanwhile wins; a second run writes nothing.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import grpc
import grpc.aio
import pytest
from gateway_helpers import running_gateway
from test_gateway_claims import leave_claim, stored_submitted
from test_gateway_submit_race import outcome, submit, workload

from muster.bus import Bus
from muster.bus.buckets import NAMES_BUCKET
from muster.bus.envelope import new_event
from muster.contracts.v1 import events_pb2
from muster.gateway.claims import decode_claim, name_key

pytestmark = pytest.mark.timeout(60)


async def submitted_before_the_claims(bus: Bus, name: str) -> str:
    """`ml/<name>` submitted by a gateway of before the claims: its event id."""
    payload = events_pb2.WorkloadSubmitted(queue_name="team-a")
    env = new_event("submitted", payload, cluster="local", workload=f"ml/{name}", source="t")
    await bus.publish(env)
    return env.event_id


async def publish(bus: Bus, field: str, payload: object, name: str) -> None:
    env = new_event(field, payload, cluster="local", workload=f"ml/{name}", source="t")  # type: ignore[arg-type]
    await bus.publish(env)


async def nats_setup(url: str) -> str:
    """`muster nats-setup` as an operator runs it on upgrade; its output."""
    argv = [sys.executable, "-m", "muster.cli.main", "nats-setup", "--nats", url]
    done = await asyncio.to_thread(
        subprocess.run, argv, capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


async def test_names_live_from_before_the_claims_are_claimed_by_nats_setup(
    bus: Bus, nats_server: str
) -> None:
    live = await submitted_before_the_claims(bus, "live")
    finished = await submitted_before_the_claims(bus, "finished")
    await publish(bus, "finished", events_pb2.WorkloadFinished(succeeded=True), "finished")
    await submitted_before_the_claims(bus, "gone")
    await publish(bus, "deleted", events_pb2.WorkloadDeleted(), "gone")
    await submitted_before_the_claims(bus, "raced")
    await leave_claim(bus, "ml/raced", "a-gateways-claim", age_s=0)  # written meanwhile

    first = await nats_setup(nats_server)
    assert "claims of names live from before MUSTER_NAMES: 2 written, 1 held already" in first
    names = await bus.kv(NAMES_BUCKET)
    claims = {}
    for name in ("live", "finished", "gone", "raced"):
        entry = await names.last_write(name_key(f"ml/{name}"))
        claims[name] = None if entry is None or entry.value is None else decode_claim(entry.value)
    assert {n: c.event_id if c else None for n, c in claims.items()} == {
        "live": live,
        "finished": finished,  # admission still holds a finished name
        "gone": None,  # deleted: free
        "raced": "a-gateways-claim",  # the gateway's claim wins
    }
    again = await nats_setup(nats_server)
    assert "claims of names live from before MUSTER_NAMES: 0 written, 3 held already" in again

    async with running_gateway(bus) as gw:
        gw.server.known.catch_up_s = 0.0  # its index is not read in time: the claims decide
        reply = await submit(gw, workload("live"), "a-second-submit")
        assert outcome(reply) == "exists"  # the stream read to its end, as the claim requires
        gw.server.known.read_s = 0.0  # nor can the stream be read at all
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await submit(gw, workload("finished"), "another-submit")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert outcome(await submit(gw, workload("gone"), "anew")) == "submitted"
    assert await stored_submitted(bus, "ml/live") == [live]
    assert await stored_submitted(bus, "ml/finished") == [finished]
