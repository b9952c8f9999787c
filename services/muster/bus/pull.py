"""Continuous pulls from a JetStream pull consumer, for the consume loops and stream replays.

nats-py's `fetch` sends one pull request per call and waits for each message in a task of its
own: per message, that costs several times the work of handling a small event. A `PullFeed`
keeps up to `batch` messages asked for or waiting to be taken (asking for more once half have
come) and hands over whatever has arrived, in delivery order. The server also stops at the
consumer's `max_ack_pending`.

A reader waiting in `take` costs one future and one timer: a consumer that owns a quarter of the
trees waits once per event or two, so an `asyncio.Event` and an `asyncio.timeout` per wait (a
dozen calls) were a measurable share of its work (docs/benchmarks.md, branch hand).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api

from muster.bus.client import MusterClient, subscribe_direct
from muster.bus.headers import status_of

log = logging.getLogger(__name__)

# nats-py keys a status's description by the enum member, whose hash is not the string's.
_DESCRIPTION = api.Header.DESCRIPTION
_LEFT = "Nats-Pending-Messages"  # on a status ending a pull request: what it never delivered
_HEARTBEAT = "100"
_NO_RESPONDERS = "503"
_CONSUMER_DELETED = "Consumer Deleted"
_SLICE_S = 0.25  # `take` looks after the requests at least this often while it waits
_HOLD_S = 0.1  # after a refused request (409), wait this long before asking again
# How long a pull request waits at the server. Idle, each expiry is a status in and a request
# out per reader: at 1-2 s, a dozen messages a second each way for a quiet installation's
# services. A request lost with its connection is replaced once reconnected (`PullFeed`).
REQUEST_EXPIRY_S = 10.0


class ConsumerDeletedError(RuntimeError):
    """The durable consumer was deleted while the loop ran: the service must stop."""

    def __init__(self, stream: str, durable: str) -> None:
        super().__init__(f"consumer {durable} of stream {stream} was deleted")


class PullFeed:
    """Messages of consumer `consumer` of `stream`, pulled continuously; `start`, `take`, `close`.

    Each pull request asks for what is missing to `batch` and expires after `expires_s`; one
    that ends unfilled (expired, or refused) is replaced. A reconnection loses the requests
    unanswered: on a MusterClient the feed asks again once reconnected, on any client when
    nothing at all was heard for longer than a request lives. The
    consumer's deletion shows as a 409 to a waiting request, or as "no responders" to a new
    one (then checked with `consumer_info`): `take` raises ConsumerDeletedError.
    """

    def __init__(
        self,
        nc: NatsClient,
        *,
        stream: str,
        consumer: str,
        batch: int,
        expires_s: float,
        api_prefix: str = api.DEFAULT_PREFIX,
    ) -> None:
        if batch < 1 or expires_s <= 0:
            raise ValueError("a pull feed needs batch >= 1 and expires_s > 0")
        self._nc = nc
        self._stream = stream
        self._consumer = consumer
        self._next_subject = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._batch = batch
        self._expires_s = expires_s
        self._js = nc.jetstream()  # for consumer_info only
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._ready: collections.deque[Msg] = collections.deque()
        self._waiter: asyncio.Future[bool] | None = None  # what `take` waits on, if it waits
        self._wanted = 1  # messages buffered that wake the waiter (`gather` asks for more)
        self._asked = 0  # messages asked for and neither delivered nor given up by the server
        self._heard_at = 0.0  # loop time of the last delivery or status
        self._hold_until = 0.0  # no request before this loop time (after a refusal)
        self._deleted = False
        self._suspect = False  # "no responders" for a request, or silence: does it still exist?

    @property
    def buffered(self) -> int:
        """Messages delivered and not taken yet."""
        return len(self._ready)

    async def start(self) -> None:
        """Subscribe to the feed's inbox and send the first pull request."""
        self._sub = await subscribe_direct(self._nc, self._inbox, self._on_message)
        self._heard_at = asyncio.get_running_loop().time()
        if isinstance(self._nc, MusterClient):
            self._nc.on_reconnected.append(self._reconnected)
        await self._top_up()

    async def take(self, limit: int, *, timeout_s: float) -> list[Msg]:
        """Up to `limit` messages in delivery order, waiting up to `timeout_s` for the first.

        Returns [] when none came in time. Raises ConsumerDeletedError once the server said the
        consumer is gone.
        """
        if not self._ready and not self._deleted:
            await self._wait(timeout_s)
        if self._deleted:
            raise ConsumerDeletedError(self._stream, self._consumer)
        count = min(limit, len(self._ready))
        taken = [self._ready.popleft() for _ in range(count)]
        if self._asked + len(self._ready) <= self._batch // 2:  # `_top_up`, without its call
            await self._ask()
        return taken

    async def gather(self, count: int, *, until: float) -> None:
        """Wait until `count` messages are buffered or the loop's clock reaches `until`,
        whichever comes first: deliveries meanwhile wake no one before the count. A request
        that ends meanwhile (expired, refused) is replaced and the wait goes on, so that
        deliveries do not stop mid-gather (a stretched round would end with what came before).
        For short waits only (a lost request is noticed by `take`)."""
        loop = asyncio.get_running_loop()
        self._wanted = count
        try:
            while len(self._ready) < count and not self._deleted and loop.time() < until:
                await self._top_up()
                waiter = self._waiter = loop.create_future()
                timer = loop.call_at(until, _wake, waiter, True)
                try:
                    if await waiter:  # `until` came, or a reconnect: `take` asks again
                        return
                finally:
                    self._waiter = None
                    timer.cancel()
        finally:
            self._wanted = 1

    async def _wait(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for a message (or the consumer's deletion), looking after the
        requests at least every `_SLICE_S` meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self._ready and not self._deleted:
            now = loop.time()
            if now >= deadline:
                return
            await self._top_up()  # a request that ended meanwhile is replaced before waiting
            waiter = self._waiter = loop.create_future()
            timer = loop.call_at(min(deadline, now + _SLICE_S), _wake, waiter, True)
            try:
                sliced = await waiter  # True: the slice passed; False: something arrived
            finally:
                self._waiter = None
                timer.cancel()
            if sliced:
                await self._look_after_requests(loop.time())
                if self._suspect:
                    await self._check_exists()

    async def close(self) -> list[Msg]:
        """Stop pulling; returns the messages delivered but not taken (the caller answers them)."""
        if isinstance(self._nc, MusterClient) and self._reconnected in self._nc.on_reconnected:
            self._nc.on_reconnected.remove(self._reconnected)
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            except nats.errors.Error as exc:  # closed or draining: nothing more comes anyway
                log.debug("pull feed unsubscribe: %r", exc)
        left = list(self._ready)
        self._ready.clear()
        return left

    def _on_message(self, msg: Msg) -> None:
        # On the connection's read loop (subscribe_direct): no awaiting here. A delivery
        # leaves asked + ready as it was, so only an ended request calls for a new one: `take`
        # sends it (woken for it, or when next called).
        now = asyncio.get_running_loop().time()
        self._heard_at = now
        status = status_of(msg)  # a delivery's headers are left unread (`DirectMsg`)
        if status is None:
            self._asked = max(0, self._asked - 1)
            self._ready.append(msg)
            if len(self._ready) < self._wanted:
                return  # `gather` waits for more
        elif status != _HEARTBEAT:
            self._request_ended(status, msg.headers or {}, now)
        else:
            return
        waiter = self._waiter  # `take` waits: wake it (inline: a call per delivery counts)
        if waiter is not None and not waiter.done():
            waiter.set_result(False)

    def _reconnected(self) -> None:
        """The connection is back, without the requests it carried: ask again now (a waiting
        `take` is woken to ask; else the next `take` asks)."""
        self._asked = 0
        self._heard_at = asyncio.get_running_loop().time()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def _request_ended(self, status: str, headers: dict[str, str], now: float) -> None:
        """A pull request ended unfilled: 408 expired, 404 nothing there, 409 refused."""
        left = headers.get(_LEFT)
        self._asked = max(0, self._asked - int(left)) if left and left.isdigit() else 0
        if status == "409" and _CONSUMER_DELETED in headers.get(_DESCRIPTION, ""):
            self._deleted = True
        elif status in ("409", _NO_RESPONDERS):
            # 409: leadership change, server shutdown, limits. 503: nobody took the request,
            # which is what a deleted consumer (or JetStream between leaders) looks like.
            log.debug("pull request refused: %s", status, extra=self._fields())
            self._hold_until = now + _HOLD_S
            self._suspect = self._suspect or status == _NO_RESPONDERS

    async def _look_after_requests(self, now: float) -> None:
        """While waiting: replace requests lost unanswered, ask again after a refusal."""
        if now - self._heard_at > self._expires_s + 1.0:
            self._asked = 0  # outlived every request: they were lost (a reconnect)
            self._heard_at = now
            self._suspect = True
        await self._top_up()

    async def _check_exists(self) -> None:
        """Ask the server whether the consumer still exists; mark it deleted if not."""
        self._suspect = False
        try:
            await self._js.consumer_info(self._stream, self._consumer)
        except nats.js.errors.NotFoundError:
            self._deleted = True
        except (nats.errors.Error, TimeoutError, OSError) as exc:  # the next silence asks again
            log.debug("consumer check failed: %r", exc, extra=self._fields())

    async def _top_up(self) -> None:
        """Ask for more once half of `batch` is neither asked for nor waiting to be taken.

        Counting what waits keeps a slow reader (a Watch client) from pulling a whole stream
        into memory: the buffer never holds much more than `batch` messages.
        """
        if self._asked + len(self._ready) <= self._batch // 2:
            await self._ask()

    async def _ask(self) -> None:
        """Ask for what is missing to `batch`, unless held back or closed."""
        if self._sub is None or self._deleted:
            return
        if asyncio.get_running_loop().time() < self._hold_until:
            return
        want = self._batch - self._asked - len(self._ready)
        if want <= 0:
            return
        request = {"batch": want, "expires": int(self._expires_s * 1e9)}
        # Not sent while reconnecting, nor when the socket fails: nats-py writes at once when
        # its flusher task is gone, and the error reaches whoever published. `take` asks again.
        try:
            await self._nc.publish(
                self._next_subject, json.dumps(request).encode(), reply=self._inbox
            )
        except (nats.errors.Error, OSError) as exc:
            log.debug("pull request not sent: %r", exc, extra=self._fields())
            return
        self._asked += want

    def _fields(self) -> dict[str, str]:
        return {"consumer": self._consumer, "stream": self._stream}


def _wake(waiter: asyncio.Future[bool], sliced: bool) -> None:
    if not waiter.done():
        waiter.set_result(sliced)
