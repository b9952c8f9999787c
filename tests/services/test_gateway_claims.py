"""A workload name's claim holds at any age of its previous life: two gateways racing a name
whose last life began longer ago than MUSTER_EVENTS' duplicate window (made short here), one of
them behind on the stream, store one `submitted`, and the other caller is told "already
exists"; a claim left by a gateway stopped mid-claim is its retry's, and no one's for ever.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
from bus_helpers import outlive_the_window, short_duplicate_window
from gateway_helpers import RunningGateway, two_gateways
from test_gateway_submit_race import outcome, submit, workload

from muster.bus import Bus, BusConfig
from muster.bus.buckets import NAMES_BUCKET
from muster.bus.envelope import new_event
from muster.bus.permissions import Deployment
from muster.bus.setup import buckets
from muster.bus.subjects import EVENTS_KEPT_S, stream_configs, workload_filters
from muster.contracts.v1 import events_pb2, services_pb2
from muster.gateway.claims import Claim, encode_claim, name_key
from muster.gateway.known import Held, KnownFollower
from muster.gateway.submit import plan_submit

pytestmark = pytest.mark.timeout(60)

WINDOW_S = 0.2  # MUSTER_EVENTS' duplicate window in these tests (2 min in production)


@pytest.fixture
async def two(
    bus: Bus, bus_config: BusConfig
) -> AsyncIterator[tuple[RunningGateway, RunningGateway]]:
    """Two gateways, each on its own connection, over MUSTER_EVENTS with a short window."""
    await short_duplicate_window(bus, WINDOW_S)
    async with two_gateways(bus_config) as pair:
        yield pair


async def delete(bus: Bus, key: str) -> None:
    """`key` deleted (as the watcher or `muster delete workload` publishes it)."""
    await bus.publish(
        new_event(
            "deleted", events_pb2.WorkloadDeleted(), cluster="local", workload=key, source="test"
        )
    )


def behind(gw: RunningGateway) -> None:
    """The gateway's index is behind the stream: it has not read what is stored (a gateway
    just started on a long stream whose first reading outlasts its catch-up allowance)."""
    gw.server.known.catch_up_s = 0.0


async def stored_submitted(bus: Bus, key: str) -> list[str]:
    """The event ids of every `submitted` of `key` stored, oldest first."""
    last = await bus.last_sequence()
    filters = list(workload_filters("local", "submitted"))
    return [env.event_id async for env in bus.replay(filters, until_sequence=last)
            if env.workload == key]  # fmt: skip


async def test_a_name_deleted_long_after_its_last_life_began_is_submitted_once_more(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    a, b = two
    first = await submit(a, workload("old"), "first")
    await delete(bus, "ml/old")
    await outlive_the_window(bus, WINDOW_S)
    behind(b)  # b has not read the deletion: it would claim the name's first life
    replies = await asyncio.gather(
        submit(a, workload("old"), "via-a"), submit(b, workload("old"), "via-b")
    )
    assert sorted(outcome(r) for r in replies) == ["exists", "submitted"]
    (winner,) = [r.objects[0].event_id for r in replies if r.objects[0].event_id]
    assert await stored_submitted(bus, "ml/old") == [first.objects[0].event_id, winner]


async def test_a_submit_of_many_answers_exists_for_the_names_held_and_stores_the_rest(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    a, b = two
    held = [f"w{i}" for i in range(8)]
    await submit(a, "---\n".join(workload(n) for n in held), "held")
    await outlive_the_window(bus, WINDOW_S)
    behind(b)  # b does not know them: the claims alone tell
    names = [f"w{i}" for i in range(16)]
    reply = await submit(b, "---\n".join(workload(n) for n in names), "sixteen")
    outcomes = {o.key: o.outcome or "submitted" for o in reply.objects}
    assert outcomes == {f"ml/{n}": "exists" if n in held else "submitted" for n in names}
    warnings = sorted(reply.warnings)
    assert warnings == sorted(f"Workload/ml/{n}: already exists; left as it is" for n in held)
    for n in names:
        assert len(await stored_submitted(bus, f"ml/{n}")) == 1, n


async def leave_claim(bus: Bus, key: str, event_id: str, *, age_s: float) -> None:
    """The claim a gateway stopped between claim and `submitted` leaves, written `age_s` ago."""
    names = await bus.kv(NAMES_BUCKET)
    claim = Claim(event_id=event_id, life=0, at_s=time.time() - age_s)
    await names.write(name_key(key), encode_claim(claim), last=0)


def event_id_of(manifest: str, idempotency_key: str) -> str:
    (planned,) = plan_submit(manifest, cluster="local", submission=idempotency_key)
    return planned.event_id


async def test_a_claim_left_mid_submit_is_its_retrys_and_no_one_elses_for_long(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    a, _ = two
    # The caller retries with its idempotency key: the claim is its own.
    await leave_claim(bus, "ml/retried", event_id_of(workload("retried"), "k"), age_s=0)
    assert outcome(await submit(a, workload("retried"), "k")) == "submitted"
    # Another caller, soon after: the claimant may still store its `submitted`, or never
    # (cancelled, killed): not "exists" while nothing is stored, but retry.
    a.server.known.held_wait_s = 0.2
    await leave_claim(bus, "ml/fresh", "a-submission-in-flight", age_s=1)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await submit(a, workload("fresh"), "other")
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "another Submit claimed this name 1s ago and has not stored it" in (
        raised.value.details() or ""
    )
    assert await stored_submitted(bus, "ml/fresh") == []
    # Long after, with no `submitted` of it anywhere: the name is free again.
    await leave_claim(bus, "ml/orphan", "a-submission-never-stored", age_s=3600)
    reply = await submit(a, workload("orphan"), "other")
    assert outcome(reply) == "submitted"
    assert await stored_submitted(bus, "ml/orphan") == [reply.objects[0].event_id]


async def test_a_claim_held_by_a_submit_storing_it_now_is_answered_exists_once_stored(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    a, b = two
    a.server.known.held_wait_s = 30.0  # a generous wait: b stores within it
    theirs = event_id_of(workload("late"), "theirs")
    await leave_claim(bus, "ml/late", theirs, age_s=0)  # b's Submit, claimed, not stored yet
    waiting = asyncio.create_task(submit(a, workload("late"), "other"))
    assert outcome(await submit(b, workload("late"), "theirs")) == "submitted"
    assert outcome(await waiting) == "exists"
    assert await stored_submitted(bus, "ml/late") == [theirs]


async def test_a_claim_found_by_a_gateway_that_cannot_read_the_stream_is_answered_unavailable(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    a, _ = two
    a.server.known.read_s = 0.0  # the stream's end cannot be read in time
    await leave_claim(bus, "ml/unsure", "another-submission", age_s=3600)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await submit(a, workload("unsure"), "k")
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "events not read in 0s: retry" in (raised.value.details() or "")
    assert await stored_submitted(bus, "ml/unsure") == []


async def test_one_name_raced_to_two_clusters_is_submitted_once(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    """Admission takes a name for one workload in every cluster: so does the claim."""

    async def to(gw: RunningGateway, cluster: str) -> services_pb2.SubmitResponse:
        request = services_pb2.SubmitRequest(
            manifest=workload("shared"), idempotency_key=cluster, cluster=cluster
        )
        reply: services_pb2.SubmitResponse = await gw.gateway.Submit(request, timeout=20)
        return reply

    replies = await asyncio.gather(to(two[0], "local"), to(two[1], "east"))
    assert sorted(outcome(r) for r in replies) == ["exists", "submitted"]
    last = await bus.last_sequence()
    filters = [f for c in ("local", "east") for f in workload_filters(c, "submitted")]
    stored = [env.cluster async for env in bus.replay(filters, until_sequence=last)]
    assert len(stored) == 1


async def test_claims_are_kept_as_long_as_the_events_that_judge_them(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    """A gateway that makes MUSTER_NAMES (no `muster nats-setup` before it) makes it as setup
    would: claims age out with MUSTER_EVENTS' events, so the bucket keeps no name for ever."""
    a, _ = two
    await submit(a, workload("aged"), "aged")
    (events, *_) = stream_configs()
    status = await (await bus.kv(NAMES_BUCKET)).status()
    assert status.ttl_s == events.max_age == EVENTS_KEPT_S
    (made,) = [b for b in buckets(Deployment()) if b.name == NAMES_BUCKET]
    assert made.ttl_s == EVENTS_KEPT_S


async def test_a_submit_that_stores_nothing_releases_the_names_it_claimed(
    two: tuple[RunningGateway, RunningGateway], bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Submits race for overlapping names; the loser answers UNAVAILABLE, and the names
    only it claimed are free at once: a third Submit of them (no idempotency key, so another
    submission) is stored without waiting out the loser's claims."""
    a, b = two
    slow = a.server.known.history  # a's NATS answers a's `submitted` late
    assert isinstance(slow, Bus)
    claimed, answer = asyncio.Event(), asyncio.Event()
    publish = slow.publish

    async def late(env: events_pb2.Envelope, **kwargs: Any) -> int:
        claimed.set()  # a publishes only once every claim of its Submit is written
        await answer.wait()
        return await publish(env, **kwargs)

    monkeypatch.setattr(slow, "publish", late)
    first = asyncio.create_task(submit(a, workload("x") + "---\n" + workload("y"), "first"))
    await claimed.wait()
    b.server.known.held_wait_s = 0.2
    loser = services_pb2.SubmitRequest(manifest=workload("y") + "---\n" + workload("z"))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await b.gateway.Submit(loser, timeout=20)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    b.server.known.held_wait_s = 30.0  # were z still held, the next Submit would wait 30 s
    third = services_pb2.SubmitRequest(manifest=workload("z"))
    reply = await b.gateway.Submit(third, timeout=5)
    assert outcome(reply) == "submitted"
    answer.set()
    assert [o.outcome or "submitted" for o in (await first).objects] == ["submitted"] * 2
    assert await stored_submitted(bus, "ml/z") == [reply.objects[0].event_id]
    assert len(await stored_submitted(bus, "ml/y")) == 1


async def test_a_released_claim_never_releases_the_claim_written_after_it(bus: Bus) -> None:
    """A claim is released only at the revision its Submit wrote: one written since (the name
    taken over meanwhile) stays."""
    names = await bus.kv(NAMES_BUCKET)
    key = name_key("ml/taken")
    mine = await names.write(key, encode_claim(Claim(event_id="a", life=0, at_s=0.0)), last=0)
    theirs = Claim(event_id="b", life=0, at_s=time.time())
    await names.write(key, encode_claim(theirs), last=mine)
    follower = KnownFollower(bus)
    await follower._release({"a": Held(key=key, life=0, revision=mine)})
    entry = await names.get(key)
    assert entry is not None
    assert entry.value == encode_claim(theirs)
