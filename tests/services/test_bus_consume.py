"""The consume loop against a real nats-server: ack, retry, dead letters, lanes, replicas, drain."""

from __future__ import annotations

import asyncio
import collections

import pytest
from bus_helpers import PENDING, SUBMITTED, Recorder, consuming, pending, submitted

from muster.bus import (
    DLQ_STREAM,
    EVENTS_STREAM,
    Bus,
    BusConfig,
    ConsumerSettings,
    Reject,
    Retry,
    connect,
)
from muster.contracts.v1.events_pb2 import Envelope

pytestmark = pytest.mark.timeout(30)


async def ack_pending(bus: Bus, durable: str) -> int:
    info = await bus.js.consumer_info(EVENTS_STREAM, durable)
    return int(info.num_ack_pending)


async def wait_until_acked(bus: Bus, durable: str, *, timeout_s: float = 5.0) -> None:
    """Wait until `durable` has nothing delivered and unacked and nothing left to deliver."""

    async def settled() -> None:
        while True:
            info = await bus.js.consumer_info(EVENTS_STREAM, durable)
            if info.num_ack_pending == 0 and info.num_pending == 0:
                return
            await asyncio.sleep(0.05)  # polling server state; bounded by the timeout

    await asyncio.wait_for(settled(), timeout_s)


async def test_a_handled_event_is_acked_with_its_sequence_set(bus: Bus) -> None:
    handler = Recorder()
    env = submitted("ns/a")
    seq = await bus.publish(env)
    async with consuming(bus, "admission", [SUBMITTED], handler):
        (got,) = await handler.wait_for_count(1)
        await wait_until_acked(bus, "admission")
    assert got.event_id == env.event_id
    assert got.sequence == seq


async def test_a_consumer_reads_only_its_subjects(bus: Bus) -> None:
    handler = Recorder()
    await bus.publish(pending("ns/a", "not for us"))
    await bus.publish(submitted("ns/a"))
    async with consuming(bus, "admission", [SUBMITTED], handler):
        await handler.wait_for_count(1)
        await wait_until_acked(bus, "admission")
    assert [e.type for e in handler.got] == ["workload.submitted"]


async def test_a_handler_raising_retry_gets_the_message_again_later(bus: Bus) -> None:
    attempts: collections.Counter[str] = collections.Counter()

    async def flaky(env: Envelope) -> None:
        attempts[env.event_id] += 1
        if attempts[env.event_id] == 1:
            raise Retry(0.1, "cluster API busy")

    handler = Recorder(flaky)
    env = submitted("ns/a")
    await bus.publish(env)
    async with consuming(bus, "admission", [SUBMITTED], handler):
        await handler.wait_for_count(1)
        await wait_until_acked(bus, "admission")
    assert attempts[env.event_id] == 2


async def test_a_handler_bug_is_retried_then_dead_lettered_at_the_last_delivery(
    bus: Bus,
) -> None:
    calls = 0

    async def broken(env: Envelope) -> None:
        nonlocal calls
        calls += 1
        raise ZeroDivisionError("bug")

    env = submitted("ns/a")
    await bus.publish(env)
    async with consuming(bus, "admission", [SUBMITTED], broken, max_deliver=2):
        await wait_for_dead_letters(bus, 1)
    assert calls == 2
    dead = await bus.js.get_msg(DLQ_STREAM, 1)
    assert dead.headers is not None
    assert "ZeroDivisionError" in dead.headers["Muster-Dlq-Reason"]
    assert dead.headers["Muster-Dlq-Deliveries"] == "2"


async def wait_for_dead_letters(bus: Bus, n: int, *, timeout_s: float = 10.0) -> None:
    async def arrived() -> None:
        while True:
            if (await bus.js.stream_info(DLQ_STREAM)).state.messages >= n:
                return
            await asyncio.sleep(0.05)  # polling server state; bounded by the timeout

    await asyncio.wait_for(arrived(), timeout_s)


async def test_a_rejected_event_goes_to_the_dlq_and_is_not_redelivered(bus: Bus) -> None:
    async def reject_a(env: Envelope) -> None:
        if env.workload == "ns/a":
            raise Reject("manifest has no pod sets")

    handler = Recorder(reject_a)
    await bus.publish(submitted("ns/a"))
    await bus.publish(submitted("ns/b"))
    async with consuming(bus, "admission", [SUBMITTED], handler):
        await wait_for_dead_letters(bus, 1)
        await handler.wait_for_count(1)
        await wait_until_acked(bus, "admission")
    dead = await bus.js.get_msg(DLQ_STREAM, 1)
    assert dead.subject == "muster.v1.dlq.admission"
    assert dead.headers is not None
    assert dead.headers["Muster-Dlq-Reason"] == "manifest has no pod sets"
    assert [e.workload for e in handler.got] == ["ns/b"]


async def test_a_poison_message_is_dead_lettered_and_consumption_continues(bus: Bus) -> None:
    handler = Recorder()
    await bus.js.publish(SUBMITTED, b"\x08\x96\x01 not an envelope \xff")
    good = submitted("ns/a")
    await bus.publish(good)
    async with consuming(bus, "admission", [SUBMITTED], handler):
        (got,) = await handler.wait_for_count(1)
        await wait_until_acked(bus, "admission")
    assert got.event_id == good.event_id
    dead = await bus.js.get_msg(DLQ_STREAM, 1)
    assert dead.data == b"\x08\x96\x01 not an envelope \xff"
    assert dead.headers is not None
    assert dead.headers["Muster-Dlq-Subject"] == SUBMITTED
    assert dead.headers["Muster-Dlq-Sequence"] == "1"
    assert "undecodable" in dead.headers["Muster-Dlq-Reason"]


async def test_an_envelope_over_the_consumers_limit_is_dead_lettered(
    bus: Bus, bus_config: BusConfig
) -> None:
    strict = await connect(BusConfig(url=bus_config.url, max_event_bytes=500))
    handler = Recorder()
    try:
        await bus.publish(submitted("ns/big", manifest="x" * 1000))  # fine for the writer
        await bus.publish(submitted("ns/small"))
        async with consuming(strict, "admission", [SUBMITTED], handler):
            await handler.wait_for_count(1)
            await wait_for_dead_letters(bus, 1)
    finally:
        await strict.close()
    assert [e.workload for e in handler.got] == ["ns/small"]
    dead = await bus.js.get_msg(DLQ_STREAM, 1)
    assert dead.headers is not None
    assert "over the limit of 500" in dead.headers["Muster-Dlq-Reason"]


class Overlap:
    """A handler's work that takes time, so that lanes overlap; counts how many ran at once."""

    def __init__(self) -> None:
        self.running = 0
        self.most_at_once = 0

    async def __call__(self, env: Envelope) -> None:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        await asyncio.sleep(0.005)
        self.running -= 1


async def test_one_workloads_events_run_in_order_while_workloads_run_in_parallel(
    bus: Bus,
) -> None:
    slow = Overlap()
    handler = Recorder(slow)
    workloads = [f"ns/w{i}" for i in range(6)]
    await bus.publish_all(pending(w, str(i)) for i in range(15) for w in workloads)
    async with consuming(bus, "watch", [PENDING], handler, lanes=4, batch=16):
        got = await handler.wait_for_count(90)
    for w in workloads:
        order = [int(e.pending.message) for e in got if e.workload == w]
        assert order == list(range(15)), w
    assert slow.most_at_once > 1


async def test_replicas_with_one_durable_share_the_work_without_duplicates(
    bus: Bus, bus_config: BusConfig
) -> None:
    replica = await connect(bus_config)
    got: dict[str, list[str]] = {"a": [], "b": []}
    done = asyncio.Condition()

    def recorder(name: str) -> Recorder:
        async def note(env: Envelope) -> None:
            await asyncio.sleep(0.01)  # work that takes time, so that the other replica pulls
            async with done:
                got[name].append(env.event_id)
                done.notify_all()

        return Recorder(note)

    envs = [submitted(f"ns/w{i}") for i in range(40)]
    await bus.publish_all(envs)
    settings = {"max_ack_pending": 4, "batch": 2, "lanes": 2}
    try:
        async with (
            consuming(bus, "binder", [SUBMITTED], recorder("a"), **settings),
            consuming(replica, "binder", [SUBMITTED], recorder("b"), **settings),
            done,
        ):
            await asyncio.wait_for(done.wait_for(lambda: sum(map(len, got.values())) >= 40), 15)
        await wait_until_acked(bus, "binder")
    finally:
        await replica.close()
    handled = got["a"] + got["b"]
    assert sorted(handled) == sorted(e.event_id for e in envs)
    assert got["a"]
    assert got["b"]


async def test_cancelling_lets_a_running_handler_finish_and_ack(bus: Bus) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def blocking(env: Envelope) -> None:
        started.set()
        await release.wait()

    handler = Recorder(blocking)
    await bus.publish(submitted("ns/a"))
    task = asyncio.create_task(bus.consume("admission", [SUBMITTED], handler))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    await asyncio.sleep(0)  # let the cancellation reach the fetch loop
    assert not task.done()  # still draining: the handler is running
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert len(handler.got) == 1
    # Acks are not confirmed: the server applies this one shortly after the loop sent it.
    await wait_until_acked(bus, "admission")


async def test_a_handler_stuck_past_the_drain_timeout_is_cancelled_and_redelivered(
    bus: Bus,
) -> None:
    started = asyncio.Event()

    async def stuck(env: Envelope) -> None:
        started.set()
        await asyncio.Event().wait()  # never returns by itself

    await bus.publish(submitted("ns/a"))
    settings = ConsumerSettings(drain_timeout_s=0.2)
    task = asyncio.create_task(bus.consume_with("admission", [SUBMITTED], stuck, settings))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    # Given back (naked), not left to the 30 s ack wait: the next replica gets it at once.
    handler = Recorder()
    async with consuming(bus, "admission", [SUBMITTED], handler):
        (again,) = await handler.wait_for_count(1, timeout_s=5)
    assert again.workload == "ns/a"


async def test_a_poison_message_in_a_batch_is_dead_lettered_and_the_others_handled_in_order(
    bus: Bus,
) -> None:
    handler = Recorder()
    await bus.publish_all(pending("ns/a", str(i)) for i in range(5))
    await bus.js.publish(PENDING, b"\xff poison")
    await bus.publish_all(pending("ns/a", str(i)) for i in range(5, 10))
    async with consuming(bus, "watch", [PENDING], handler, batch=16):
        got = await handler.wait_for_count(10)
        await wait_until_acked(bus, "watch")
    assert [int(e.pending.message) for e in got] == list(range(10))
    dead = await bus.js.get_msg(DLQ_STREAM, 1)
    assert dead.headers is not None
    assert dead.headers["Muster-Dlq-Sequence"] == "6"
    assert "undecodable" in dead.headers["Muster-Dlq-Reason"]


async def test_a_loop_at_max_ack_pending_goes_on_as_handlers_finish(bus: Bus) -> None:
    slow = Overlap()
    handler = Recorder(slow)
    await bus.publish_all(pending(f"ns/w{i}", "m") for i in range(30))
    async with consuming(bus, "watch", [PENDING], handler, lanes=8, max_ack_pending=3):
        await handler.wait_for_count(30)
        await wait_until_acked(bus, "watch")
    assert slow.most_at_once == 3


async def test_a_handler_running_past_the_ack_wait_keeps_its_message(bus: Bus) -> None:
    async def long(env: Envelope) -> None:
        await asyncio.sleep(1.5)  # longer than the ack wait: told in progress meanwhile

    handler = Recorder(long)
    await bus.publish(submitted("ns/a"))
    async with consuming(bus, "admission", [SUBMITTED], handler, ack_wait_s=1.0):
        await handler.wait_for_count(1)
        await wait_until_acked(bus, "admission")
    assert len(handler.got) == 1  # never redelivered


async def test_a_message_queued_behind_a_long_handler_is_not_redelivered_meanwhile(
    bus: Bus,
) -> None:
    async def long_first(env: Envelope) -> None:
        if env.workload == "ns/a":
            await asyncio.sleep(3.0)  # past the ack wait; ns/b waits on the same lane meanwhile

    handler = Recorder(long_first)
    await bus.publish(submitted("ns/a"))
    await bus.publish(submitted("ns/b"))
    async with consuming(bus, "admission", [SUBMITTED], handler, ack_wait_s=2.0, lanes=1):
        await handler.wait_for_count(2)
        await wait_until_acked(bus, "admission")
    assert [e.workload for e in handler.got] == ["ns/a", "ns/b"]  # each once
