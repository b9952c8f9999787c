"""Publishing against a real nats-server: PubAck sequences, dedupe, size limits, fencing."""

from __future__ import annotations

import pytest
from bus_helpers import SUBMITTED, pending, submitted

from muster.bus import (
    DLQ_STREAM,
    EVENTS_STREAM,
    Bus,
    BusConfig,
    Conflict,
    Reject,
    Retry,
    connect,
    subject_of,
)
from muster.bus.envelope import encode

pytestmark = pytest.mark.timeout(30)


async def test_ensure_streams_is_idempotent(bus: Bus) -> None:
    await bus.ensure_streams()
    await bus.ensure_streams()
    events = await bus.js.stream_info(EVENTS_STREAM)
    assert events.config.duplicate_window == 120
    assert events.config.max_age == 7 * 24 * 3600
    dlq = await bus.js.stream_info(DLQ_STREAM)
    assert dlq.config.subjects == ["muster.v1.dlq.*"]


async def test_publish_returns_the_stream_sequence(bus: Bus) -> None:
    assert await bus.publish(submitted("ns/a")) == 1
    assert await bus.publish_all([submitted("ns/b"), submitted("ns/c")]) == [2, 3]
    assert await bus.last_sequence(EVENTS_STREAM) == 3


async def test_publishing_the_same_event_id_again_stores_it_once(bus: Bus) -> None:
    cause = submitted("ns/a")
    await bus.publish(submitted("ns/other"))
    first = await bus.publish(pending("ns/a", "m", cause=cause))
    # A handler that ran again after a crash rebuilds the same event: same id, same sequence.
    again = await bus.publish(pending("ns/a", "m", cause=cause))
    assert again == first == 2
    info = await bus.js.stream_info(EVENTS_STREAM)
    assert info.state.messages == 2


async def test_publish_sets_the_dedupe_and_trace_headers(bus: Bus) -> None:
    env = submitted("ns/a")
    env.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    seq = await bus.publish(env)
    stored = await bus.js.get_msg(EVENTS_STREAM, seq)
    assert stored.subject == subject_of(env) == SUBMITTED
    assert stored.headers is not None
    assert stored.headers["Nats-Msg-Id"] == env.event_id
    assert stored.headers["traceparent"] == env.traceparent


async def test_an_envelope_over_max_event_bytes_is_refused_at_publish(
    bus_config: BusConfig,
) -> None:
    small = await connect(BusConfig(url=bus_config.url, max_event_bytes=500))
    try:
        await small.ensure_streams()
        with pytest.raises(Reject, match="over the limit of 500"):
            await small.publish(submitted("ns/a", manifest="x" * 1000))
        assert await small.last_sequence(EVENTS_STREAM) == 0
    finally:
        await small.close()


async def test_the_servers_max_payload_is_respected_even_under_a_larger_limit(
    bus_config: BusConfig,
) -> None:
    big = await connect(BusConfig(url=bus_config.url, max_event_bytes=8 * 1024 * 1024))
    try:
        await big.ensure_streams()
        too_big = submitted("ns/a", manifest="x" * big.nc.max_payload)
        with pytest.raises(Reject, match="max_payload"):
            await big.publish(too_big)
    finally:
        await big.close()


async def test_a_fenced_publish_conflicts_when_another_writer_came_first(bus: Bus) -> None:
    seq = await bus.publish(pending("ns/a", "1"), expected_last_subject_sequence=0)
    await bus.publish(pending("ns/a", "2"), expected_last_subject_sequence=seq)
    with pytest.raises(Conflict):
        await bus.publish(pending("ns/a", "3"), expected_last_subject_sequence=seq)


async def test_publish_together_stores_in_order_and_tells_each_lost_fence(bus: Bus) -> None:
    record = pending("ns/record", "1")
    fence = await bus.publish(record), subject_of(record)  # the last record: sequence 1
    envs = [pending("ns/a", "1"), pending("ns/b", "1"), submitted("ns/c")]

    results = await bus.publish_together(envs, [fence, (0, fence[1]), None])

    assert (results[0], results[2]) == (2, 3)  # stored in the order sent
    lost = results[1]
    assert isinstance(lost, Conflict)
    assert (lost.subject, lost.expected) == (subject_of(envs[1]), 0)
    assert await bus.last_sequence(EVENTS_STREAM) == 3


async def test_publishing_with_no_stream_raises_retry(bus: Bus) -> None:
    await bus.js.delete_stream(EVENTS_STREAM)
    with pytest.raises(Retry):
        await bus.publish(submitted("ns/a"))


async def test_publish_many_stores_each_workloads_events_in_order(bus: Bus) -> None:
    envs = [pending(f"ns/{w}", str(n)) for n in range(3) for w in "abc"]  # a0 b0 c0 a1 ...
    envs.insert(0, submitted("ns/a"))

    results = await bus.publish_many(envs)

    assert sorted(r for r in results if isinstance(r, int)) == list(range(1, len(envs) + 1))
    for workload in ("ns/a", "ns/b", "ns/c"):
        mine = [
            (r, e.event_id) for r, e in zip(results, envs, strict=True) if e.workload == workload
        ]
        assert mine == sorted(mine)  # stored in the order given
    again = await bus.publish_many(envs)  # a retried batch: JetStream drops the copies
    assert again == results
    assert await bus.last_sequence(EVENTS_STREAM) == len(envs)


async def test_publish_many_sends_nothing_of_a_workload_after_its_event_that_failed(
    bus_config: BusConfig,
) -> None:
    small = await connect(BusConfig(url=bus_config.url, max_event_bytes=500))
    try:
        await small.ensure_streams()
        a0, a1, a2 = (
            pending("ns/a", "0"),
            submitted("ns/a", manifest="x" * 1000),
            pending("ns/a", "2"),
        )
        b0, b1 = pending("ns/b", "0"), pending("ns/b", "1")

        results = await small.publish_many([a0, b0, a1, b1, a2])

        assert isinstance(results[0], int)
        assert isinstance(results[1], int)
        assert isinstance(results[2], Reject)
        assert isinstance(results[3], int)
        assert isinstance(results[4], Retry)
        assert "not sent" in str(results[4])
        stored = [(await small.js.get_msg(EVENTS_STREAM, seq)).data for seq in (1, 2, 3)]
        assert stored == [encode(a0), encode(b0), encode(b1)]
        assert await small.last_sequence(EVENTS_STREAM) == 3
    finally:
        await small.close()


async def test_publish_raw_many_reports_each_message_alone(bus: Bus) -> None:
    results = await bus.publisher.publish_raw_many(
        [(SUBMITTED, b"one"), ("no.stream.here", b"two"), (SUBMITTED, b"three")]
    )

    assert results[0] == 1
    assert results[2] == 2
    assert isinstance(results[1], Retry)
    assert "no stream answered" in str(results[1])
    stored = await bus.js.get_msg(EVENTS_STREAM, 2)
    assert stored.data == b"three"
    assert not stored.headers


async def test_a_publish_nobody_acks_is_a_retry_after_the_timeout(bus_config: BusConfig) -> None:
    quick = await connect(BusConfig(url=bus_config.url, publish_timeout_s=0.2))
    try:
        await quick.ensure_streams()
        # A plain subscriber, not a stream: the server finds a responder, which never answers.
        silent = await quick.nc.subscribe("silent.subject")
        with pytest.raises(Retry, match="no PubAck"):
            await quick.publisher.publish_raw("silent.subject", b"x", {})
        results = await quick.publisher.publish_raw_many(
            [("silent.subject", b"y"), (SUBMITTED, b"stored")]
        )
        assert isinstance(results[0], Retry)
        assert "no PubAck" in str(results[0])
        assert results[1] == 1
        await silent.unsubscribe()
    finally:
        await quick.close()
