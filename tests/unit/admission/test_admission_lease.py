"""The shard lease over a compare-and-set store: wait to acquire, renew, lose, release."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest
from nats.js.errors import BadRequestError, ServiceUnavailableError

from muster.admission.lease import LeaseLostError, LeaseRefusedError, ShardLease
from muster.bus.errors import Conflict, Unavailable
from muster.bus.kv import Entry

pytestmark = pytest.mark.timeout(10)


class MemoryBucket:
    """Key → (revision, value) with JetStream KV's create/update/delete semantics."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[int, bytes]] = {}
        self.revision = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise Unavailable("bucket down")

    async def get(self, key: str) -> Entry | None:
        self._check()
        if key not in self.keys:
            return None
        revision, value = self.keys[key]
        return Entry(key, value, revision, 0.0)

    async def create(self, key: str, value: bytes) -> int:
        self._check()
        if key in self.keys:
            raise Conflict(key, 0)
        return self._put(key, value)

    async def update(self, key: str, value: bytes, last: int) -> int:
        self._check()
        if key not in self.keys or self.keys[key][0] != last:
            raise Conflict(key, last)
        return self._put(key, value)

    async def delete(self, key: str, last: int | None = None) -> None:
        self._check()
        self.keys.pop(key, None)

    def expire(self, key: str) -> None:
        self.keys.pop(key, None)

    def _put(self, key: str, value: bytes) -> int:
        self.revision += 1
        self.keys[key] = (self.revision, value)
        return self.revision


def lease(bucket: MemoryBucket, owner: str, *, ttl_s: float = 1.0) -> ShardLease:
    return ShardLease(bucket, shard=3, owner=owner, ttl_s=ttl_s, renew_s=0.05, poll_s=0.01)


async def test_second_owner_waits_until_the_first_lets_go() -> None:
    bucket = MemoryBucket()
    first, second = lease(bucket, "one"), lease(bucket, "two")
    await first.acquire()
    assert bucket.keys["admission.3"][1] == b"one"
    waiting = asyncio.create_task(second.acquire())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await first.release()
    await asyncio.wait_for(waiting, 1)
    assert second.held
    assert bucket.keys["admission.3"][1] == b"two"


async def test_renewal_keeps_the_lease_and_a_takeover_loses_it() -> None:
    bucket = MemoryBucket()
    mine = lease(bucket, "me")
    await mine.acquire()
    holding = asyncio.create_task(mine.hold())
    first_revision = mine.revision
    async with asyncio.timeout(1):
        while mine.revision == first_revision:  # noqa: ASYNC110 (renewed by another task)
            await asyncio.sleep(0.01)
    bucket.expire("admission.3")  # we paused too long: it expired, someone else took it
    thief = lease(bucket, "thief")
    await thief.acquire()
    with pytest.raises(LeaseLostError, match="taken over") as lost:
        await asyncio.wait_for(holding, 1)
    assert lost.value.cause == "taken_over"
    assert not mine.held
    assert thief.term > mine.term  # a later holder's term is larger (takeover records)


async def test_losing_nats_for_a_whole_ttl_loses_the_lease() -> None:
    bucket = MemoryBucket()
    mine = lease(bucket, "me", ttl_s=0.3)
    await mine.acquire()
    bucket.down = True
    with pytest.raises(LeaseLostError, match="not renewed") as lost:
        await asyncio.wait_for(mine.hold(), 2)
    assert lost.value.cause == "unreachable"


async def test_confirm_writes_nothing_while_fresh_and_renews_a_stale_lease_still_its_own() -> None:
    bucket = MemoryBucket()
    mine = lease(bucket, "me")
    await mine.acquire()
    revision = mine.revision
    await mine.confirm()
    assert mine.revision == revision  # renewed just now: nothing written
    mine.renewed_at -= mine.ttl_s  # as after a loop starved past the TTL
    await mine.confirm()
    assert mine.revision != revision
    assert bucket.keys["admission.3"] == (mine.revision, b"me")


async def test_confirm_of_a_stale_lease_that_expired_or_was_taken_raises_naming_why() -> None:
    bucket = MemoryBucket()
    mine = lease(bucket, "me")
    await mine.acquire()
    mine.renewed_at -= mine.ttl_s
    bucket.expire("admission.3")
    with pytest.raises(LeaseLostError, match=r"admission\.3 expired: last renewed") as lost:
        await mine.confirm()
    assert lost.value.cause == "expired"
    await lease(bucket, "thief").acquire()
    with pytest.raises(LeaseLostError, match="taken over by 'thief'") as lost:
        await mine.confirm()
    assert lost.value.cause == "taken_over"


def test_renewal_must_be_shorter_than_the_ttl() -> None:
    with pytest.raises(ValueError, match="shorter"):
        ShardLease(MemoryBucket(), shard=0, owner="x", ttl_s=1, renew_s=1)


class AnsweringBucket(MemoryBucket):
    """Fails each `create` with the next of `failures` (raised from nats-py's error, as the
    bus's `wrapped` raises it), then works."""

    def __init__(self, failures: list[Exception], denied: list[Exception] | None = None) -> None:
        super().__init__()
        self.failures = failures
        self.denied = denied  # where a violation is reported with each failure, if given

    async def create(self, key: str, value: bytes) -> int:
        if self.failures:
            cause = self.failures.pop(0)
            if self.denied is not None:
                self.denied.append(RuntimeError(f"permissions violation for publish to {key}"))
            raise Unavailable(f"create {key}: {cause}") from cause
        return await super().create(key, value)


async def test_no_answer_is_waited_out_and_an_error_answer_is_not() -> None:
    outage = AnsweringBucket([nats.errors.TimeoutError(), ServiceUnavailableError(code=503)])
    await asyncio.wait_for(lease(outage, "me").acquire(), 1)
    assert outage.keys["admission.3"][1] == b"me"
    full = AnsweringBucket([BadRequestError(code=400, description="message size exceeds maximum")])
    with pytest.raises(LeaseRefusedError, match=r"lease admission\.3: JetStream refused it.*size"):
        await asyncio.wait_for(lease(full, "me").acquire(), 1)


async def test_no_answer_after_a_permissions_violation_is_a_refusal() -> None:
    denied: list[Exception] = []
    bucket = AnsweringBucket([nats.errors.TimeoutError()] * 3, denied)
    mine = ShardLease(bucket, shard=3, owner="me", denied=denied, poll_s=0.01, renew_s=0.05)
    with pytest.raises(LeaseRefusedError, match=r"NATS refused a permission.*admission\.3"):
        await asyncio.wait_for(mine.acquire(), 1)


class LosingAnswers(MemoryBucket):
    """Applies the next `lose` writes but fails them as a lost connection does."""

    def __init__(self) -> None:
        super().__init__()
        self.lose = 0

    def _put(self, key: str, value: bytes) -> int:
        revision = super()._put(key, value)
        if self.lose:
            self.lose -= 1
            raise Unavailable("connection lost before the answer")
        return revision


async def test_a_write_whose_answer_was_lost_is_known_as_this_owners() -> None:
    bucket = LosingAnswers()
    mine, theirs = lease(bucket, "me"), lease(bucket, "them")
    bucket.lose = 1  # the create is stored; its answer is lost
    await asyncio.wait_for(mine.acquire(), 1)  # taken back at once, not waited for
    assert mine.revision == bucket.keys["admission.3"][0]
    holding = asyncio.create_task(mine.hold())
    bucket.lose = 1  # a renewal stored, its answer lost: the next one conflicts with it
    async with asyncio.timeout(1):
        while bucket.lose or mine.revision != bucket.keys["admission.3"][0]:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    assert not holding.done()  # still held, where it was lost before
    bucket.expire("admission.3")
    await theirs.acquire()
    with pytest.raises(LeaseLostError, match="taken over"):
        await asyncio.wait_for(holding, 1)
