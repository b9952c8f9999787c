"""Readers that outlive NATS: a nats-server restarted mid-test (same port, same store), and
consumers the server deleted; setting up (a bucket) waits for a server that is away."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import pytest
from admission_world import eventually
from budget import wait_s
from bus_helpers import PENDING, Recorder, consuming, pending
from nats_lost import LostFirst
from nats_process import NatsServer

from muster.bus import EVENTS_STREAM, Bus, BusConfig, connect
from muster.bus.errors import Unavailable
from muster.bus.kv import Bucket
from muster.cluster import ClusterError
from muster.cluster.keys import NODE_PREFIX, POD_PREFIX, bucket_name, node_key, pod_key
from muster.cluster.sim import SimStore
from muster.contracts.v1.events_pb2 import Envelope

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def running(reader: Awaitable[None]) -> AsyncIterator[None]:
    """`reader` in a task while the body runs; fails the test if it ended meanwhile."""
    task = asyncio.ensure_future(reader)
    try:
        yield
    finally:
        ended = task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not ended, f"the reader ended: {task.exception() if not task.cancelled() else ''}"


@contextlib.asynccontextmanager
async def following(bus: Bus, subjects: list[str]) -> AsyncIterator[Recorder]:
    """A `replay(follow=True)` of `subjects` into a Recorder."""
    got = Recorder()

    async def follow() -> None:
        async for env in bus.replay(subjects, follow=True):
            await got(env)

    async with running(follow()):
        yield got


async def test_a_following_replay_reads_on_in_order_across_a_nats_server_restart(
    bus: Bus, restart_nats: Callable[[], None]
) -> None:
    await bus.publish_all(pending("ns/a", str(i)) for i in range(3))
    async with following(bus, [PENDING]) as got:
        await got.wait_for_count(3)
        restart_nats()  # deletes the replay's in-memory consumer
        await publish_when_back(bus, [pending("ns/a", str(i)) for i in range(3, 6)])
        seen = await got.wait_for_count(6, timeout_s=20)
    assert [e.sequence for e in seen] == [1, 2, 3, 4, 5, 6]  # none lost, none twice
    assert [e.pending.message for e in seen] == [str(i) for i in range(6)]


async def test_a_deleted_durable_is_made_again_after_the_last_message_handled(
    bus: Bus,
) -> None:
    handler = Recorder()
    await bus.publish_all([pending("ns/a", "a"), pending("ns/b", "b")])
    async with consuming(bus, "gone", [PENDING], handler) as task:
        await handler.wait_for_count(2)
        await bus.js.delete_consumer(EVENTS_STREAM, "gone")
        await bus.publish(pending("ns/c", "c"))
        got = await handler.wait_for_count(3, timeout_s=20)
        info = await bus.js.consumer_info(EVENTS_STREAM, "gone")
        assert not task.done()
    # Made again at "c": "a" and "b" were handled, and are not delivered again (a consumer
    # made anew from the stream's start would have).
    assert info.config.opt_start_seq == 3
    assert [e.pending.message for e in got] == ["a", "b", "c"]


async def publish_when_back(bus: Bus, envs: list[Envelope], *, timeout_s: float = 15.0) -> None:
    """Publish `envs` once the client has reconnected (publishing retries until it has)."""

    async def publish() -> None:
        for env in envs:
            while True:
                try:
                    await bus.publish(env)
                    break
                except Exception:  # not connected again yet: try again
                    await asyncio.sleep(0.1)

    await asyncio.wait_for(publish(), timeout_s)


async def test_a_bucket_opened_while_nats_server_restarts_is_opened_once_it_is_back(
    bus_config: BusConfig, nats_process: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    # What a service does as it starts (the gateway, admission after its lease); a request
    # NATS does not answer fails in 0.5 s here, as one the restart swallowed does in 5 s.
    quick = msgspec.structs.replace(bus_config, publish_timeout_s=0.5)
    bus = await connect(quick)
    try:
        nats_process.stop()
        opening = asyncio.create_task(bus.kv("MUSTER_TEST_RESTART"))

        async def told() -> bool:
            if opening.done():
                opening.result()  # it gave up (raises), or NATS answered while it was away
                raise AssertionError("opened while nats-server was away")
            return "NATS does not answer" in caplog.text

        await eventually(told)
        nats_process.start()
        bucket = await asyncio.wait_for(opening, wait_s(None))
        await bucket.put("k", b"v")
        stored = await bucket.get("k")
        assert stored is not None
        assert stored.value == b"v"
    finally:
        await bus.close()


class View:
    """What a reader of a bucket knows: each key's last value and revision, from the items
    `read` hands on, and every revision in the order it came."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[bytes | None, int]] = {}
        self.revisions: list[int] = []
        self._changed = asyncio.Condition()

    async def take(self, key: str, value: bytes | None, revision: int) -> None:
        async with self._changed:
            self.values[key] = (value, revision)
            self.revisions.append(revision)
            self._changed.notify_all()

    async def reaches(self, revision: int) -> None:
        """Wait until the reader handed on `revision` (or later), for what is left of the test."""
        async with self._changed, asyncio.timeout(wait_s(None)):
            await self._changed.wait_for(
                lambda: bool(self.revisions) and self.revisions[-1] >= revision
            )


@contextlib.asynccontextmanager
async def reading(feed: AsyncIterator[tuple[str, bytes | None, int]]) -> AsyncIterator[View]:
    """A `View` of `feed` while the body runs."""
    view = View()

    async def read() -> None:
        async for key, value, revision in feed:
            await view.take(key, value, revision)

    async with running(read()):
        yield view


async def changes_of(
    kv: Bucket, *, after: int | None = None
) -> AsyncIterator[tuple[str, bytes | None, int]]:
    async for change in kv.changes("pod.", "node.", after=after):
        yield change.key, None if change.deleted else change.data, change.revision


async def entries_of(kv: Bucket) -> AsyncIterator[tuple[str, bytes | None, int]]:
    async for entry in kv.watch():
        if entry is not None:
            yield entry.key, entry.value, entry.revision


async def sim_changes_of(store: SimStore) -> AsyncIterator[tuple[str, bytes | None, int]]:
    """What every sim cluster reader (gang-permit's pod view, the binder's) reads."""
    async for change in store.watch(POD_PREFIX, NODE_PREFIX):
        value = None if change.type == "DELETED" else msgspec.json.encode(change.obj)
        yield change.key, value, change.revision


async def when_back(write: Callable[[], Awaitable[int]]) -> int:
    """`write()` once the client has reconnected (retried until it is)."""
    async with asyncio.timeout(wait_s(None)):
        while True:
            try:
                return await write()
            except (ClusterError, Unavailable):  # not connected again yet: try again
                await asyncio.sleep(0.1)


async def readers_of(bus: Bus, bucket: str) -> bool:
    """Whether some reader of `bucket` reads (the server holds a consumer of it)."""
    info = await bus.js.stream_info(f"KV_{bucket}")
    return bool(info.state.consumer_count)


async def reconnected(bus: Bus, times: int) -> None:
    """Wait until the client has reconnected `times` times in all."""
    async with asyncio.timeout(wait_s(None)):
        while bus.nc.stats["reconnects"] < times:  # noqa: ASYNC110 (nats-py only counts them)
            await asyncio.sleep(0.02)


async def test_bucket_readers_hand_on_every_write_across_two_quick_nats_server_restarts(
    bus: Bus, restart_nats: Callable[[], None]
) -> None:
    # A pod stored Pending, Succeeded between two restarts, another deleted between them, one
    # created after: the chaos run's books once counted such a pod as still running.
    store = await SimStore.open(bus.kv, cluster="local")
    kv = await bus.kv(bucket_name("local"))
    pending = {"status": {"phase": "Pending"}}
    a = await store.create(pod_key("ml", "a"), pending)
    b = await store.create(pod_key("ml", "b"), pending)
    await store.create(node_key("n1"), {"spec": {}})
    async with (
        reading(changes_of(kv)) as feed,
        reading(entries_of(kv)) as watch,
        reading(sim_changes_of(store)) as sim,
    ):
        for view in (feed, watch, sim):
            await view.reaches(await store.last_revision())
        restart_nats()  # every reader's in-memory consumer goes
        await reconnected(bus, 1)
        done = {"status": {"phase": "Succeeded"}}
        await when_back(lambda: store.update(pod_key("ml", "a"), done, revision=a))
        b_stored = await store.get(pod_key("ml", "b"))
        assert b_stored is not None
        await store.delete(b_stored)
        restart_nats()  # while the readers make their consumers again
        await reconnected(bus, 2)
        last = await when_back(lambda: store.create(pod_key("ml", "c"), pending))
        for view in (feed, watch, sim):
            await view.reaches(last)
    stored = {k: (e.value, e.revision) for k, e in (await kv.snapshot()).items()}
    for view in (feed, watch, sim):
        live = {k: v for k, v in view.values.items() if v[0] is not None}
        assert {k: r for k, (_, r) in live.items()} == {k: r for k, (_, r) in stored.items()}
        assert view.revisions == sorted(set(view.revisions))  # in order, none twice
    for view in (feed, watch, sim):  # the deletion between the restarts came
        assert view.values[pod_key("ml", "b")][0] is None
        assert view.values[pod_key("ml", "b")][1] > b


async def test_a_feed_after_a_revision_hands_on_none_before_it_when_its_consumer_is_lost_early(
    bus: Bus, restart_nats: Callable[[], None]
) -> None:
    # The sim store's readers resume this way after a failed watch. nats-py's ordered consumer
    # made its lost consumer again from the stream's start when it had delivered nothing.
    kv = await bus.kv(bucket_name("local"))
    known = [await kv.write(key, b"1", last=0) for key in ("pod.a", "pod.b")]
    async with reading(changes_of(kv, after=known[-1])) as feed:
        await eventually(lambda: readers_of(bus, bucket_name("local")))
        restart_nats()  # nothing written since `after`: the feed has handed nothing on yet
        later = await when_back(lambda: kv.write("pod.c", b"1", last=0))
        await feed.reaches(later)
    assert feed.revisions == [later]


HISTORY = "MUSTER_TEST_HISTORY"  # a bucket keeping several writes per key


async def read_while_lost(
    bus: Bus, bus_config: BusConfig, nats_process: NatsServer, *, keep: int
) -> tuple[list[int], int]:
    """The revisions a change feed of `HISTORY` hands on through a `LostFirst` proxy that
    passes its first `keep` deliveries, then restarts nats-server, until a write made after;
    and that write's revision."""
    kv = await bus.kv(HISTORY)
    async with LostFirst(nats_process) as lost:
        reader = await connect(msgspec.structs.replace(bus_config, url=lost.url))
        try:
            lost.arm(f"$KV.{HISTORY}.".encode(), answer=b"consumer_create_response", keep=keep)
            async with reading(changes_of(await reader.kv(HISTORY))) as feed:
                await asyncio.wait_for(lost.cut.wait(), wait_s(None))
                later = await when_back(lambda: kv.write("pod.c", b"1", last=0))
                await feed.reaches(later)
        finally:
            await reader.close()
    assert lost.passed == keep  # the feed had those, and the others were lost with the server
    assert lost.dropped
    return feed.revisions, later


async def test_a_feed_whose_consumer_is_lost_before_it_delivered_starts_at_each_keys_last_write(
    bus: Bus, bus_config: BusConfig, nats_process: NatsServer
) -> None:
    # nats-py's ordered consumer made a consumer lost before its first delivery again from the
    # stream's first message: in a bucket keeping several writes per key (the chaos bench's
    # cluster), the feed handed on a write its key had replaced, after the key's last.
    kv = await bus.kv(HISTORY, history=4)
    await kv.put("pod.a", b"1")
    last_a = await kv.put("pod.a", b"2")
    b = await kv.put("pod.b", b"1")
    revisions, later = await read_while_lost(bus, bus_config, nats_process, keep=0)
    assert revisions == [last_a, b, later]


async def test_a_feed_lost_while_it_read_each_keys_last_write_hands_on_no_replaced_one(
    bus: Bus, bus_config: BusConfig, nats_process: NatsServer
) -> None:
    # Made again from the revision after the last it handed on, the feed handed on pod.a's
    # first write (replaced by its second) before the second.
    kv = await bus.kv(HISTORY, history=4)
    x = await kv.put("pod.x", b"1")
    await kv.put("pod.a", b"1")
    b = await kv.put("pod.b", b"1")
    last_a = await kv.put("pod.a", b"2")
    revisions, later = await read_while_lost(bus, bus_config, nats_process, keep=1)
    assert revisions == [x, b, last_a, later]


def failing_pulls(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, asyncio.Event]:
    """(failing, failed): once `failing` is set, the next pull request of `bus` fails as a
    socket that went with the server does, and `failed` is set. nats-py writes at once when
    its flusher task is gone (two reconnects at once can leave it so), and the socket's error
    reaches whoever published: here, a reader's next pull, due a second on (readers started
    after this call)."""
    publish = bus.nc.publish
    failing, failed = asyncio.Event(), asyncio.Event()

    async def pull_fails(subject: str, *args: Any, **kwargs: Any) -> None:
        if failing.is_set() and ".CONSUMER.MSG.NEXT." in subject:
            failing.clear()
            failed.set()
            raise ConnectionResetError("the socket went with the server")
        await publish(subject, *args, **kwargs)

    monkeypatch.setattr(bus.nc, "publish", pull_fails)
    # The readers' requests expire each second, so that the next pull comes soon.
    monkeypatch.setattr("muster.bus.replay.REQUEST_EXPIRY_S", 1.0)
    return failing, failed


async def test_a_feed_whose_pull_the_connection_fails_reads_on(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    kv = await bus.kv(bucket_name("local"))
    first = await kv.write("pod.a", b"1", last=0)
    failing, failed = failing_pulls(bus, monkeypatch)
    async with reading(changes_of(kv)) as feed:
        await feed.reaches(first)
        failing.set()
        await asyncio.wait_for(failed.wait(), wait_s(None))  # its next pull (a second on)
        later = await kv.write("pod.b", b"1", last=0)
        await feed.reaches(later)
    assert feed.revisions == [first, later]


async def test_a_following_replay_whose_pull_the_connection_fails_reads_on(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    await bus.publish(pending("ns/a", "0"))
    failing, failed = failing_pulls(bus, monkeypatch)
    async with following(bus, [PENDING]) as got:
        await got.wait_for_count(1)
        failing.set()
        await asyncio.wait_for(failed.wait(), wait_s(None))  # its next pull (a second on)
        await bus.publish(pending("ns/a", "1"))
        seen = await got.wait_for_count(2)
    assert [e.pending.message for e in seen] == ["0", "1"]
