"""MusterClient against a real nats-server: direct delivery, its failure modes, header parsing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import nats
import nats.errors
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.protocol.command import pub_cmd

from muster.bus import Bus
from muster.bus.client import (
    MusterClient,
    connect,
    delivery,
    position,
    stream_sequence,
    subscribe_direct,
)
from muster.bus.headers import DirectMsg, header_block, parse_header_lines, status_of

pytestmark = pytest.mark.timeout(30)


async def until(check: Callable[[], bool], *, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110  # what the callbacks fill, polled: simplest here
            await asyncio.sleep(0.01)


async def test_the_bus_connects_with_a_muster_client(bus: Bus) -> None:
    assert isinstance(bus.nc, MusterClient)


async def test_direct_messages_arrive_in_order_with_their_headers(nats_server: str) -> None:
    nc = await connect(nats_server)
    got: list[Msg] = []
    try:
        await nc.subscribe_direct("t.direct", got.append)
        for i in range(200):
            await nc.publish("t.direct", str(i).encode(), headers={"Nats-Msg-Id": f"id-{i}"})
        await until(lambda: len(got) == 200)
        assert [m.data for m in got] == [str(i).encode() for i in range(200)]
        assert [m.headers for m in got] == [{"Nats-Msg-Id": f"id-{i}"} for i in range(200)]
        assert nc.stats["in_msgs"] >= 200
    finally:
        await nc.close()


async def test_a_direct_delivery_reads_its_headers_when_asked_and_a_status_at_once(
    bus: Bus,
) -> None:
    nc = bus.nc
    assert isinstance(nc, MusterClient)
    got: list[Msg] = []
    inbox = nc.new_inbox()
    await nc.subscribe_direct(inbox, got.append)
    await nc.publish(inbox, b"x", headers={"Nats-Msg-Id": "a", "Status": "409"})
    # A pull request nothing answers ends with an inline status: 408, after 50 ms.
    await bus.js.add_consumer("MUSTER_EVENTS", durable_name="status-reader")
    request = b'{"batch": 1, "expires": 50000000}'
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.MUSTER_EVENTS.status-reader", request, inbox)
    await until(lambda: len(got) == 2)
    message, ended = got
    assert isinstance(message, DirectMsg)
    assert message._read is None
    assert message._unread
    assert status_of(message) is None  # a header named Status is not a status line
    assert message.headers == {"Nats-Msg-Id": "a", "Status": "409"}
    assert status_of(ended) == "408"
    assert ended.headers is not None
    assert ended.headers["Status"] == "408"


async def test_after_unsubscribe_nothing_more_is_delivered(nats_server: str) -> None:
    nc = await connect(nats_server)
    got: list[Msg] = []
    try:
        sub = await nc.subscribe_direct("t.gone", got.append)
        await nc.publish("t.gone", b"1")
        await until(lambda: len(got) == 1)
        await sub.unsubscribe()
        await nc.publish("t.gone", b"2")
        await nc.flush()
        await asyncio.sleep(0.1)
        assert [m.data for m in got] == [b"1"]
        assert not nc._direct  # nothing left behind for the unsubscribed sid
    finally:
        await nc.close()


async def test_a_failing_callback_loses_no_later_message_nor_the_connection(
    nats_server: str,
) -> None:
    nc = await connect(nats_server)
    got: list[bytes] = []

    def fragile(msg: Msg) -> None:
        if msg.data == b"bad":
            raise ValueError("a bug in the callback")
        got.append(msg.data)

    try:
        await nc.subscribe_direct("t.fragile", fragile)
        for data in (b"a", b"bad", b"b"):
            await nc.publish("t.fragile", data)
        await until(lambda: got == [b"a", b"b"])
        assert nc.is_connected
        reply = await nc.request("$JS.API.INFO", b"", timeout=2)  # the read loop still runs
        assert reply.data
    finally:
        await nc.close()


async def test_other_subscriptions_keep_nats_py_delivery(nats_server: str) -> None:
    nc = await connect(nats_server)
    direct: list[bytes] = []
    queued: asyncio.Queue[bytes] = asyncio.Queue()

    async def cb(msg: Msg) -> None:
        await queued.put(msg.data)

    try:
        await nc.subscribe_direct("t.a", lambda m: direct.append(m.data))
        await nc.subscribe("t.b", cb=cb)
        await nc.publish("t.a", b"to-direct")
        await nc.publish("t.b", b"to-callback")
        assert await asyncio.wait_for(queued.get(), 2) == b"to-callback"
        await until(lambda: direct == [b"to-direct"])
    finally:
        await nc.close()


async def test_subscribe_direct_works_on_a_plain_nats_py_client(nats_server: str) -> None:
    nc: NatsClient = await nats.connect(nats_server)
    got: list[bytes] = []
    try:
        await subscribe_direct(nc, "t.plain", lambda m: got.append(m.data))
        await nc.publish("t.plain", b"x")
        await until(lambda: got == [b"x"])
    finally:
        await nc.close()


# Header names and values as a server may relay them: tokens, spaces and tabs, colons, UTF-8
# and stray bytes. (Names holding ASCII control characters 0x1c-0x1f are left out: nats-py
# treats those as whitespace, `bytes.split` does not; no muster header has one.)
_NAME = st.binary(max_size=12).filter(lambda b: not any(0x1C <= c <= 0x1F for c in b))
_VALUE = st.text(max_size=20).map(lambda s: s.encode("utf-8")) | st.binary(max_size=20)
_LINE = st.tuples(_NAME, st.sampled_from([b":", b": ", b":\t", b""]), _VALUE).map(
    lambda t: (t[0] + t[1] + t[2]).replace(b"\r\n", b" ")
)


@given(st.lists(_LINE, max_size=6))
def test_header_parsing_agrees_with_nats_py(lines: list[bytes]) -> None:
    raw = b"\r\n".join(lines) + b"\r\n\r\n"
    expected = NatsClient._parse_header_lines(raw)
    expected.pop("", None)  # nats-py keeps a line with no name under ""; we skip it
    assert parse_header_lines(raw) == expected


async def _written(client: NatsClient, headers: dict[str, str]) -> bytes:
    """The command `client` writes to publish `headers` (not connected: nothing is sent)."""
    commands: list[bytes] = []

    async def keep(cmd: bytes, priority: bool = False) -> None:
        commands.append(cmd)

    client._send_command = keep  # type: ignore[method-assign]
    await client._send_publish("s.t", "_INBOX.r", b"data", 4, headers)
    return commands[0]


_HEADERS = st.dictionaries(
    st.text(max_size=10) | st.sampled_from(["Nats-Msg-Id", "traceparent", " traceparent "]),
    st.text(max_size=20),
    max_size=4,
)


@given(_HEADERS)
async def test_published_headers_are_the_bytes_nats_py_writes(headers: dict[str, str]) -> None:
    try:
        expected = await _written(NatsClient(), headers)
    except nats.errors.BadHeaderError:
        with pytest.raises(nats.errors.BadHeaderError):
            header_block(headers)
        return
    assert await _written(MusterClient(), headers) == expected


@given(st.sampled_from(["$JS.ACK.MUSTER_EVENTS.binder.1.2.3.1700000000000000000.0", "a.b"]))
async def test_a_lingering_ack_is_the_command_nats_py_writes(subject: str) -> None:
    client = MusterClient()  # not connected: what it would write stays pending
    client.publish_soon(subject, within_s=10.0, at_most=100)
    assert client._pending == [pub_cmd(subject, "", b"")]


def test_a_header_value_cannot_break_the_block() -> None:
    block = header_block({"Nats-Msg-Id": "a\r\nX-Forged: 1", "traceparent": " 00-aa \n"})
    assert block == b"NATS/1.0\r\nNats-Msg-Id: a  X-Forged: 1\r\ntraceparent: 00-aa\r\n\r\n"


def test_muster_headers_parse() -> None:
    raw = b"Nats-Msg-Id: abc\r\ntraceparent: 00-aa-bb-01\r\nStatus:  503 \r\n\r\n"
    assert parse_header_lines(raw) == {
        "Nats-Msg-Id": "abc",
        "traceparent": "00-aa-bb-01",
        "Status": "503",
    }


@pytest.mark.parametrize(
    "reply",
    [
        "$JS.ACK.MUSTER_EVENTS.admission-0.1.1234.99.1700000000000000000.0",
        "$JS.ACK.hub.ACCHASH.MUSTER_EVENTS.admission-0.2.1234.98.1700000000000000000.5.rnd",
    ],
    ids=["v1", "with-domain"],
)
def test_stream_sequence_reads_the_reply_as_nats_py_does(reply: str) -> None:
    assert stream_sequence(Msg(None, subject="s", reply=reply)) == 1234  # type: ignore[arg-type]
    assert Msg(None, subject="s", reply=reply).metadata.sequence.stream == 1234  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "reply",
    [
        "$JS.ACK.MUSTER_EVENTS.replay.3.1234.99.1700000000000000000.7",
        "$JS.ACK.hub.ACCHASH.MUSTER_EVENTS.replay.4.1234.98.1700000000000000000.5.rnd",
        "$JS.ACK.hub.ACCHASH.MUSTER_EVENTS.replay.5.1234.98.1700000000000000000.5",
    ],
    ids=["v1", "with-domain", "eleven-tokens"],
)
def test_position_and_delivery_read_the_reply_as_nats_py_does(reply: str) -> None:
    md = Msg(None, subject="s", reply=reply).metadata  # type: ignore[arg-type]
    at = position(Msg(None, subject="s", reply=reply))  # type: ignore[arg-type]
    assert at == (md.sequence.stream, md.sequence.consumer, md.num_pending)
    assert delivery(Msg(None, subject="s", reply=reply)) == (  # type: ignore[arg-type]
        md.sequence.stream,
        md.num_delivered,
    )


def test_stream_sequence_of_a_core_message_is_an_error() -> None:
    with pytest.raises(nats.errors.NotJSMessageError):
        stream_sequence(Msg(None, subject="s", reply="_INBOX.abc"))  # type: ignore[arg-type]


async def test_stream_sequence_of_a_real_delivery(bus: Bus) -> None:
    await bus.nc.publish("muster.v1.local.workload.running", b"x")
    await bus.nc.flush()
    sub = await bus.js.pull_subscribe("muster.v1.local.workload.running", durable="seq-reader")
    (msg,) = await sub.fetch(1, timeout=5)
    assert stream_sequence(msg) == msg.metadata.sequence.stream >= 1


async def _publish_in_two_iterations(nc: MusterClient, subject: str, count: int) -> int:
    """Publish `count` messages from tasks, half of them one loop iteration after the others
    (as Submits reach the gateway's loop); how many socket writes carried them."""
    writes = 0
    transport = nc._transport
    assert transport is not None
    write = transport.writelines

    def counted(data: list[bytes]) -> None:
        nonlocal writes
        writes += 1
        write(data)

    transport.writelines = counted  # type: ignore[method-assign,assignment]  # counted in place
    try:

        async def publish(i: int) -> None:
            if i % 2:
                await asyncio.sleep(0)  # arrives an iteration later
            await nc.publish(subject, str(i).encode())

        await asyncio.gather(*(publish(i) for i in range(count)))
        await nc.flush()  # a PING written, and its PONG back: everything before it was sent
    finally:
        transport.writelines = write  # type: ignore[method-assign]
    return writes


async def _subscribed_then_connected(
    nats_server: str, subject: str, got: list[Msg]
) -> tuple[MusterClient, MusterClient]:
    """A reader whose subscription to `subject` fills `got`, then a publisher connected after
    the server confirmed it: nats-server 2.15 can miss a new subscription, for a few ms, in
    what a client connected before it publishes (about 3 % of tries on a loaded machine)."""
    reader = await connect(nats_server)
    await reader.subscribe_direct(subject, got.append)
    await reader.flush()
    return reader, await connect(nats_server)


@pytest.mark.parametrize("late", [False, True])
async def test_late_flushes_send_publishes_of_two_iterations_in_one_write(
    nats_server: str, late: bool
) -> None:
    got: list[Msg] = []
    reader, nc = await _subscribed_then_connected(nats_server, "t.late", got)
    try:
        nc.flush_late = late
        writes = await _publish_in_two_iterations(nc, "t.late", 20)
        await until(lambda: len(got) == 20)
        assert sorted(int(m.data) for m in got) == list(range(20))
        # The flush's PING is one more write, the same either way.
        assert writes == (2 if late else 3)
    finally:
        await nc.close()
        await reader.close()


async def test_what_a_late_flushing_client_published_is_sent_when_it_closes(
    nats_server: str,
) -> None:
    got: list[Msg] = []
    reader, nc = await _subscribed_then_connected(nats_server, "t.closing", got)
    try:
        nc.flush_late = True
        for i in range(5):
            await nc.publish("t.closing", str(i).encode())
        await nc.close()  # before the flusher was woken
        await until(lambda: len(got) == 5)
        assert [m.data for m in got] == [str(i).encode() for i in range(5)]
    finally:
        await reader.close()


@pytest.mark.parametrize("backed_up", [False, True])
async def test_publishes_are_written_without_the_flusher_unless_the_socket_is_backed_up(
    nats_server: str, backed_up: bool
) -> None:
    got: list[Msg] = []
    reader, nc = await _subscribed_then_connected(nats_server, "t.written", got)
    queue = nc._flush_queue
    assert queue is not None
    assert nc._transport is not None
    socket = nc._transport._io_writer.transport  # type: ignore[attr-defined]
    wakes = 0
    put = queue.put_nowait

    def counted(item: asyncio.Future[None]) -> None:
        nonlocal wakes
        wakes += 1
        put(item)

    queue.put_nowait = counted  # type: ignore[method-assign]  # nats-py's flusher's wake-ups
    if backed_up:  # as when the server reads slower than we write: the flusher drains it
        socket.get_write_buffer_size = lambda: 1
    try:
        for i in range(5):
            await nc.publish("t.written", str(i).encode())
            await asyncio.sleep(0)  # each in a loop iteration of its own: a write each
        await until(lambda: len(got) == 5)
        assert [m.data for m in got] == [str(i).encode() for i in range(5)]
        assert (wakes > 0) is backed_up
    finally:
        queue.put_nowait = put  # type: ignore[method-assign]
        if backed_up:
            del socket.get_write_buffer_size
        await nc.close()
        await reader.close()


async def test_a_command_the_server_refuses_costs_a_reconnect_not_the_connection(bus: Bus) -> None:
    # nats-server ends the connection over a protocol line longer than 4 KiB; nats-py then
    # closed for good, and the service kept running without NATS.
    await bus.nc.publish("t." + "x" * 5000, b"")
    await until(lambda: not bus.nc.is_connected)

    await until(lambda: bus.nc.is_connected)
    ack = await bus.js.publish("muster.v1.local.workload.submitted", b"after")
    assert ack.seq >= 1
    assert not bus.nc.is_closed


async def test_a_subscription_the_server_refuses_leaves_the_connection_up(bus: Bus) -> None:
    # nats-server answers "Invalid Subject" and keeps the connection: nats-py closed it.
    # (nats-py's own subscribe checks the subject first: the command is written raw.)
    reconnects = bus.nc.stats["reconnects"]
    await bus.nc._send_command(b"SUB a..b 9999\r\n")
    await bus.nc.flush()

    ack = await bus.js.publish("muster.v1.local.workload.submitted", b"after")
    assert ack.seq >= 1
    assert bus.nc.is_connected
    assert bus.nc.stats["reconnects"] == reconnects  # nor dropped and made again


async def test_a_flush_given_up_before_its_pong_leaves_the_connection_reading(bus: Bus) -> None:
    # nats-py's flush cancels its ping's future when it stops waiting (cancelled, or timed
    # out); the PONG answering it then raised InvalidStateError in nats-py's read loop, which
    # ended the loop: the connection stayed "connected" and heard nothing more.
    pongs = bus.nc._pongs_received
    flush = asyncio.create_task(bus.nc.flush())
    await asyncio.sleep(0)  # its PING is on the way
    flush.cancel()
    await asyncio.gather(flush, return_exceptions=True)
    await until(lambda: bus.nc._pongs_received > pongs)  # the PONG was read

    ack = await bus.js.publish("muster.v1.local.workload.submitted", b"after", timeout=10)
    assert ack.seq >= 1
