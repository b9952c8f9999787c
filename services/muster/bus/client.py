"""nats-py's client with a lighter receive path for muster's own inboxes, and lighter headers.

Every message nats-py delivers to a callback goes through the subscription's asyncio.Queue and
a task of its own, and every header block through a character-by-character check. For the
inboxes a service reads most (pull-consumer deliveries, PubAcks), that is more work than
handling the message. `subscribe_direct` hands such messages to a plain function as they are
parsed: no queue, no task switch, and the header block read only if asked for (`DirectMsg`).
The parsing is muster's too (bus/nats_parser.py): no regular expression, copy or coroutine per
message on the way to that function.
Everything else (JetStream push subscriptions with flow control and ordered-consumer resets,
requests, KV watches) keeps nats-py's own path.
On the way out, a published message's header block is the same bytes nats-py writes, built
in one join (`header_block`) instead of a regular-expression check and four appends per header,
and an ack can leave with the next write rather than in one of its own (`ack_soon`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.protocol.command import hpub_cmd
from nats.protocol.parser import AUTHORIZATION_VIOLATION, PERMISSIONS_ERR, STALE_CONNECTION

from muster.bus.headers import (
    STATUS,
    DirectMsg,
    header_block,
    is_status,
    parse_header_lines,
)
from muster.bus.nats_parser import FastParser

log = logging.getLogger(__name__)

DirectCallback = Callable[[Msg], None]

# The one protocol error after which nats-server keeps the connection (a SUB it refused).
_SERVER_KEEPS = "invalid subject"
# A JetStream delivery's reply subject: $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.
# <consumer seq>.<time>.<pending>, with two more tokens (domain, account hash) in the newer form.
_V1_TOKENS = 9
_V2_TOKENS = 12


def stream_sequence(msg: Msg) -> int:
    """The stream sequence of JetStream delivery `msg`, read straight from its reply subject.

    `msg.metadata` parses every field into objects (a timestamp among them): several times
    the cost, for the one number most readers need.
    """
    tokens = (msg.reply or "").split(".")
    if len(tokens) == _V1_TOKENS and tokens[1] == "ACK":
        return int(tokens[5])
    if len(tokens) >= _V2_TOKENS and tokens[1] == "ACK":
        return int(tokens[7])
    return msg.metadata.sequence.stream  # anything else: nats-py's parser (and its errors)


class Delivery(NamedTuple):
    """A JetStream delivery's stream sequence, and how many times it was delivered so far."""

    stream: int
    delivered: int


def delivery(msg: Msg) -> Delivery:
    """`msg`'s `Delivery`, read straight from its reply subject as `stream_sequence` reads it
    (a consume loop needs both numbers for every message; `msg.metadata` is a dozen calls)."""
    tokens = (msg.reply or "").split(".")
    if len(tokens) == _V1_TOKENS and tokens[1] == "ACK":
        return Delivery(int(tokens[5]), int(tokens[4]))
    if len(tokens) >= _V2_TOKENS and tokens[1] == "ACK":
        return Delivery(int(tokens[7]), int(tokens[6]))
    md = msg.metadata  # anything else: nats-py's parser (and its errors)
    return Delivery(md.sequence.stream, md.num_delivered)


class Position(NamedTuple):
    """Where a JetStream delivery stands: its stream and consumer sequences, and how many
    messages the consumer had left after it."""

    stream: int
    consumer: int
    pending: int


def position(msg: Msg) -> Position:
    """`msg`'s `Position`, read straight from its reply subject as `stream_sequence` reads it
    (what `msg.metadata` says, without its timestamp and objects)."""
    tokens = (msg.reply or "").split(".")
    if len(tokens) == _V1_TOKENS and tokens[1] == "ACK":
        return Position(int(tokens[5]), int(tokens[6]), int(tokens[8]))
    if len(tokens) >= _V2_TOKENS and tokens[1] == "ACK":
        return Position(int(tokens[7]), int(tokens[8]), int(tokens[10]))
    md = msg.metadata  # anything else: nats-py's parser (and its errors)
    return Position(md.sequence.stream, md.sequence.consumer, md.num_pending)


class MusterClient(NatsClient):
    """A nats-py `Client` that can deliver a subscription's messages straight to a function,
    and, with `flush_late`, send what was published one loop iteration later than nats-py.

    What is published is written in the next loop iteration, as nats-py does, but by a
    callback rather than by waking nats-py's flusher task through its queue (a future, a queue
    hand-off and a task step with its `drain`, about thirty calls per write): a service that
    publishes a few messages per wake-up paid that per wake-up. The flusher still writes when
    the socket is backed up (its `drain` holds back what follows) and with `flush_late`.
    Acks can wait for a write made anyway (`publish_soon`).
    """

    _parse_header_lines = staticmethod(parse_header_lines)

    def __init__(self) -> None:
        super().__init__()
        self._direct: dict[int, DirectCallback] = {}
        # MSG and HMSG parsed without nats-py's per-message work (bus/nats_parser.py).
        self._ps = FastParser(self, self._deliver_direct)
        # nats-py wakes its flusher at the first publish of a loop iteration, so the flusher
        # writes in the next one. With `flush_late`, the wake-up itself waits an iteration:
        # what tasks publish in that next iteration (calls that reached the loop just after)
        # shares the write. For the gateway's Submits that means fewer writes, and fewer
        # PubAck packets from the server (docs/benchmarks.md, "submit").
        self.flush_late = False
        self._wake_due = False
        self._write_due = False  # `_write_pending` is scheduled
        # Told when the connection is lost: each fails what waits for an answer on it (the
        # publisher's PubAcks), as the requests nats-py keeps are failed (`_fail_waiting`).
        self.on_lost: list[Callable[[], None]] = []
        # Told once reconnected: each asks again for what went with the connection (the pull
        # feeds' requests, which the server never ends on a connection it lost).
        self.on_reconnected: list[Callable[[], None]] = []
        # `publish_soon`'s messages waiting for a write: how many, in which `_pending` list
        # (every write replaces the list, so another list means they left), and the timer
        # that writes them if nothing else does.
        self._lingering = 0
        self._lingering_in: list[bytes] | None = None
        self._linger_timer: asyncio.TimerHandle | None = None

    async def _flush_pending(self, force_flush: bool = False) -> Any:
        flusher = self._flusher_task
        if force_flush or not self.is_connected or flusher is None:
            return await super()._flush_pending(force_flush)
        if flusher.done():
            return await super()._flush_pending(force_flush)  # nats-py then writes at once
        if not self.flush_late:
            if not self._write_due:
                self._write_due = True
                asyncio.get_running_loop().call_soon(self._write_pending)
        elif not self._wake_due:
            self._wake_due = True
            asyncio.get_running_loop().call_soon(self._wake_flusher)
        return None

    def _write_pending(self) -> None:
        """Write what is pending now, unless the socket is backed up: then the flusher writes
        it and waits for the socket to drain, as nats-py does."""
        self._write_due = False
        if not self._pending_data_size or not self.is_connected:
            return  # nothing, or reconnecting: nats-py sends what is pending once reconnected
        transport = self._transport
        writer = getattr(transport, "_io_writer", None)  # a TCP (or TLS) connection's
        socket = writer.transport if writer is not None else None
        if transport is None or socket is None or socket.is_closing():
            self._wake_flusher()
            return
        if socket.get_write_buffer_size():
            self._wake_flusher()
            return
        transport.writelines(self._pending)
        self._pending = []
        self._pending_data_size = 0
        if self._linger_timer is not None:  # what lingered left with this write
            self._linger_timer.cancel()
            self._linger_timer = None

    def publish_soon(self, subject: str, *, within_s: float, at_most: int) -> None:
        """Queue an empty message to `subject` (a JetStream ack) to leave with the connection's
        next write, whatever makes it, and `within_s` from now at the latest; at once (in the
        next loop iteration) when `at_most` such messages wait. Raises as `publish` does on a
        closed or draining connection; while reconnecting it waits in the buffer, as a
        publish does.

        An ack answers no one who waits: sent alone, each was a write of its own, and a read
        for the server, a few milliseconds before the next publish would have carried it.
        """
        if self.is_closed:
            raise nats.errors.ConnectionClosedError
        if self.is_draining_pubs:
            raise nats.errors.ConnectionDrainingError
        command = f"PUB {subject}  0\r\n\r\n".encode()  # `pub_cmd(subject, "", b"")`, inline
        if self._lingering_in is not self._pending:  # written since: none lingers there
            self._lingering, self._lingering_in = 0, self._pending
        self._pending.append(command)
        self._pending_data_size += len(command)
        self.stats["out_msgs"] += 1
        self._lingering += 1
        loop = asyncio.get_running_loop()
        if self._lingering >= at_most or within_s <= 0:
            self._write_lingering()
        elif self._linger_timer is None:
            self._linger_timer = loop.call_later(within_s, self._write_lingering)

    def _write_lingering(self) -> None:
        """Write what `publish_soon` queued, in the next loop iteration, unless a write is
        due by then anyway."""
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        if self._write_due or self._wake_due or not self._pending_data_size:
            return
        if self.flush_late:
            self._wake_due = True
            asyncio.get_running_loop().call_soon(self._wake_flusher)
        else:
            self._write_due = True
            asyncio.get_running_loop().call_soon(self._write_pending)

    def _wake_flusher(self) -> None:
        self._wake_due = False
        queue = self._flush_queue
        if not self.is_connected or queue is None or not queue.empty():
            return  # reconnecting (nats-py sends what is pending then), or a wake-up is due
        queue.put_nowait(asyncio.get_running_loop().create_future())

    async def subscribe_direct(self, subject: str, cb: DirectCallback) -> Subscription:
        """Subscribe to `subject`; each message is passed to `cb` as soon as it is parsed.

        `cb` runs on the connection's read loop, so it must be quick and must not block: it
        usually appends to a buffer and sets an event. The subscription has no pending queue
        and so no slow-consumer limit: the caller bounds what can arrive (a pull request's
        batch, its own publishes' replies).
        """
        sub = await self.subscribe(subject)  # no callback: nats-py starts no task for it
        self._direct[sub._id] = cb
        return sub

    async def _send_publish(
        self,
        subject: str,
        reply: str,
        payload: bytes,
        payload_size: int,
        headers: dict[str, Any] | None,
    ) -> None:
        """nats-py's, with the header block from `header_block`."""
        if headers is None or not subject:  # nats-py's own: a plain PUB, or its error
            await super()._send_publish(subject, reply, payload, payload_size, headers)
            return
        command = hpub_cmd(subject, reply, header_block(headers), payload)
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += payload_size
        await self._send_command(command)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    async def abandon(self) -> None:
        """Close now, with the server unreachable: what is buffered for it is dropped (nats-py
        would write it to the lost connection's transport, and raise), and every request
        waiting for an answer fails at once with ConnectionClosedError instead of timing out."""
        self._pending = []
        self._pending_data_size = 0
        self._fail_waiting(nats.errors.ConnectionClosedError)
        await self.close()

    async def _attempt_reconnect(self) -> None:
        """nats-py's, after failing what waits for an answer on the connection just lost: the
        server's answers to it went with the connection, and nats-py would leave each request
        to its timeout (5 s for muster's); its caller retries now instead, as on a timeout.
        Once reconnected, `on_reconnected` is told."""
        self._fail_waiting(nats.errors.ConnectionReconnectingError)
        await super()._attempt_reconnect()
        if self.is_connected:
            for told in list(self.on_reconnected):
                told()

    async def _process_err(self, err_msg: str) -> None:
        """nats-py's, except for an error the server ends the connection over one command
        ("maximum control line exceeded", "Unknown Protocol Operation"): reconnect, as after
        a lost connection. nats-py closes for good there, which left a service running but
        deaf to NATS (every gateway call then failed "connection closed"). Authorization,
        permissions and stale-connection errors, and errors while connecting, keep nats-py's
        handling."""
        theirs = (AUTHORIZATION_VIOLATION, PERMISSIONS_ERR, STALE_CONNECTION)
        if (
            self.is_connecting
            or not self.options["allow_reconnect"]
            or any(known in err_msg for known in theirs)
        ):
            await super()._process_err(err_msg)
            return
        error = nats.errors.Error(f"nats: {err_msg.strip(chr(39))}")
        self._err = error
        await self._error_cb(error)
        if _SERVER_KEEPS in err_msg.lower():  # the connection is fine: only told
            return
        await self._process_op_err(error)

    async def _process_pong(self) -> None:
        """nats-py's, except that a PONG answering a ping no one waits for any more is only
        counted. `flush` cancels its ping's future when it stops waiting (its timeout, or its
        caller cancelled, as a stopping consume loop's last flush may be); nats-py then set a
        result on the cancelled future, and the InvalidStateError ended the read loop: the
        connection stayed up but deaf until the pings noticed, minutes later."""
        if self._pongs:
            future = self._pongs.pop(0)
            if not future.done():
                future.set_result(True)
            self._pongs_received += 1
            self._pings_outstanding = 0

    def _fail_waiting(self, error: type[nats.errors.Error]) -> None:
        """Fail every request waiting for an answer with `error`, and tell `on_lost`."""
        for future in list(self._resp_map.values()):
            if not future.done():
                future.set_exception(error())
        for told in self.on_lost:
            told()

    def _remove_sub(self, sid: int, max_msgs: int = 0) -> None:
        self._direct.pop(sid, None)
        super()._remove_sub(sid, max_msgs)

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        """nats-py's, except for a direct subscription's status messages (a pull request's
        end, a heartbeat): read at once, as nats-py reads them, then handed over. The parser
        hands over a direct subscription's other messages itself (`_deliver_direct`)."""
        cb = self._direct.get(sid)
        if cb is None or sid not in self._subs:
            # nats-py's own parser passes None for a MSG too, whatever its annotation says.
            await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]
            return
        if not headers or not is_status(headers):
            self._deliver_direct(sid, subject, reply, data, headers)
            return
        hdr = await self._process_headers(headers)
        self._deliver_direct(sid, subject, reply, data, None, status_headers=hdr or {})

    def _deliver_direct(
        self,
        sid: int,
        subject: bytes,
        reply: bytes,
        data: bytes,
        headers: bytes | None,
        *,
        status_headers: dict[str, str] | None = None,
    ) -> bool:
        """Hand a message for a direct subscription to its callback now, its header block
        left unread (`DirectMsg`); False, doing nothing, for any other subscription's
        message and for a status, which `_process_msg` reads first (`status_headers`)."""
        cb = self._direct.get(sid)
        if cb is None or sid not in self._subs or (headers and is_status(headers)):
            return False
        msg = DirectMsg.of(self, sid, subject, reply, data, unread=headers)
        if status_headers is not None:
            msg.headers = status_headers or None
            msg.status = status_headers.get(STATUS)
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        try:
            cb(msg)
        except Exception:  # a bug in cb must not end the read loop (and the connection)
            log.exception("direct subscription callback failed for %s", msg.subject)
        return True


async def subscribe_direct(nc: NatsClient, subject: str, cb: DirectCallback) -> Subscription:
    """`MusterClient.subscribe_direct` where `nc` is one; else a callback subscription calling
    `cb` (a plain nats-py client, as tests and other programs may pass)."""
    if isinstance(nc, MusterClient):
        return await nc.subscribe_direct(subject, cb)

    async def deliver(msg: Msg) -> None:
        cb(msg)

    return await nc.subscribe(subject, cb=deliver)


def ack_soon(nc: NatsClient, msg: Msg, *, within_s: float, at_most: int) -> bool:
    """Queue the ack of JetStream delivery `msg` (delivered on `nc`) to leave with the next
    write, within `within_s` (`MusterClient.publish_soon`, whose errors it raises). False,
    queuing nothing, when `nc` is not a MusterClient: the caller acks at once."""
    if isinstance(nc, MusterClient) and msg.reply:
        nc.publish_soon(msg.reply, within_s=within_s, at_most=at_most)
        return True
    return False


async def connect(servers: str | list[str], **options: Any) -> MusterClient:
    """`nats.connect` returning a MusterClient (with `outage_callbacks` unless given others)."""
    nc = MusterClient()
    told = outage_callbacks(nc, log)
    options.setdefault("error_cb", told.error_cb)
    options.setdefault("disconnected_cb", told.disconnected_cb)
    options.setdefault("reconnected_cb", told.reconnected_cb)
    await nc.connect(servers, **options)
    return nc


# How a lost connection shows in nats-py's error callback (before and while reconnecting).
_CONNECTION_LOST = (nats.errors.UnexpectedEOF, nats.errors.StaleConnectionError, OSError)


class OutageCallbacks(NamedTuple):
    error_cb: Callable[[Exception], Awaitable[None]]
    disconnected_cb: Callable[[], Awaitable[None]]
    reconnected_cb: Callable[[], Awaitable[None]]


def outage_callbacks(
    nc: NatsClient,
    logger: logging.Logger,
    *,
    on_down: Callable[[], None] | None = None,
    on_up: Callable[[], None] | None = None,
    on_denied: Callable[[Exception], None] | None = None,
) -> OutageCallbacks:
    """nats-py connection callbacks that tell an outage in one line as it starts
    (`disconnected from NATS (why); reconnecting`) and one as it ends, instead of nats-py's
    default: a traceback for every reconnect attempt. `on_down`/`on_up` are told too (the
    bus's metrics count them), and `on_denied` of each permissions violation the server
    reports (a request it dropped, which otherwise only times out)."""
    lost: list[Exception] = []  # why the connection went, told with the disconnection

    async def on_error(exc: Exception) -> None:
        # A lost connection, and every reconnect attempt while NATS is away, fail alike.
        if nc.is_reconnecting or isinstance(exc, _CONNECTION_LOST):
            lost[:] = [exc]
            logger.debug("NATS connection: %r", exc)
            return
        logger.warning("NATS connection error: %r", exc)
        if on_denied is not None and PERMISSIONS_ERR in str(exc):
            on_denied(exc)

    async def on_disconnect() -> None:
        if nc.is_closed:  # closing on purpose (drain, close) is not news
            return
        why = f" ({lost[0]!r})" if lost else ""
        logger.warning("disconnected from NATS%s; reconnecting", why)
        if on_down is not None:
            on_down()

    async def on_reconnect() -> None:
        lost.clear()
        logger.info("reconnected to NATS")
        if on_up is not None:
            on_up()

    return OutageCallbacks(on_error, on_disconnect, on_reconnect)
