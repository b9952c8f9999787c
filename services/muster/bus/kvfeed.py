"""A key-value bucket's change feed (`Bucket.changes`): an ordered consumer that pulls.

nats-py's ordered push consumer hands every message to the subscription's own task through an
asyncio.Queue, then to the reader through another: per change, that costs more than reading
the change (the watcher, the sim kubelet and gang-permit's pod cache each read three per
simulated pod). `ChangeFeed` pulls from an ephemeral consumer that needs no acks (AckPolicy
none) through a `PullFeed`, whose deliveries come straight from the connection's read loop, a
batch at a time, and keeps the ordered consumer's promise itself: every write once, in stream
order, across NATS restarts. A gap in the consumer's delivery count, the consumer's deletion or
a reconnect makes it start a new consumer just after the last message it handed over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.nuid import NUID

from muster.bus.cancel import raise_if_cancelling
from muster.bus.errors import Unavailable, wrapped
from muster.bus.pull import ConsumerDeletedError, PullFeed

log = logging.getLogger(__name__)

BATCH = 256  # messages asked for at a time (and the most `take` returns)
_EXPIRES_S = 5.0  # a pull request lives this long; a lost one is replaced a second after
_IDLE_S = 1.0  # an idle feed looks this often whether the connection was re-established
_INACTIVE_S = 60.0  # the server removes a consumer no one pulled from for this long
_RETRY_FIRST_S = 0.1
_RETRY_MAX_S = 2.0

# A delivery's reply subject: $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
# seq>.<time>.<pending>, with two more tokens (domain, account hash) in the newer form.
_V1_TOKENS = 9
_V2_TOKENS = 12


def sequences(msg: Msg) -> tuple[int, int]:
    """(stream sequence, consumer sequence) of JetStream delivery `msg`, from its reply subject."""
    tokens = (msg.reply or "").split(".")
    if len(tokens) == _V1_TOKENS and tokens[1] == "ACK":
        return int(tokens[5]), int(tokens[6])
    if len(tokens) >= _V2_TOKENS and tokens[1] == "ACK":
        return int(tokens[7]), int(tokens[8])
    meta = msg.metadata  # anything else: nats-py's parser (and its errors)
    return meta.sequence.stream, meta.sequence.consumer


class ChangeFeed:
    """The messages of `stream` on `subjects`, in stream order: with `after` None each
    subject's last first, else every one after stream sequence `after`; `start`, `take`,
    `close`."""

    def __init__(
        self, js: JetStreamContext, stream: str, subjects: Sequence[str], *, after: int | None
    ) -> None:
        self._js = js
        self._nc = js._nc  # nats-py's JetStreamContext keeps its connection there
        self._stream = stream
        self._subjects = list(subjects)
        self._after = after
        self._last = 0  # stream sequence of the last message handed over (0: none yet)
        self._delivered = 0  # consumer sequence of the same, on the current consumer
        self._name = ""
        self._feed: PullFeed | None = None
        self._reconnects = 0  # the connection's count when the current consumer was made

    async def start(self) -> None:
        """Make the consumer and start pulling; `Unavailable` when NATS fails."""
        with wrapped(f"change feed of {self._stream}"):
            await self._make()

    async def take(self) -> list[Msg]:
        """The next messages (1 to `BATCH`), waiting for them as long as it takes; a NATS
        restart, a lost consumer or a gap is outlasted by starting over after the last."""
        while True:
            raise_if_cancelling()
            feed = self._feed
            if feed is None:
                await self._restart("starting again")
                continue
            try:
                msgs = await feed.take(BATCH, timeout_s=_IDLE_S)
            except ConsumerDeletedError:
                await self._restart("its consumer is gone")
                continue
            if not msgs:
                if self._nc.stats["reconnects"] != self._reconnects:
                    await self._restart("reconnected to NATS")
                continue
            in_order = self._in_order(msgs)
            if len(in_order) < len(msgs):
                await self._restart("a delivery went missing")
            if in_order:
                return in_order

    def _in_order(self, msgs: list[Msg]) -> list[Msg]:
        """`msgs` up to the first that does not follow the last handed over."""
        for i, msg in enumerate(msgs):
            stream_seq, consumer_seq = sequences(msg)
            if consumer_seq != self._delivered + 1:
                return msgs[:i]
            self._delivered, self._last = consumer_seq, stream_seq
        return msgs

    async def close(self) -> None:
        """Stop pulling and remove the consumer (the server would, after `_INACTIVE_S`)."""
        await self._drop()

    async def _restart(self, why: str) -> None:
        """A new consumer just after the last message handed over, tried until NATS answers."""
        log.info("restarting the change feed of %s: %s", self._stream, why)
        await self._drop()
        delay_s = _RETRY_FIRST_S
        while True:
            raise_if_cancelling()
            try:
                await self.start()
                return
            except Unavailable as exc:
                log.debug("change feed of %s not restarted: %r", self._stream, exc)
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, _RETRY_MAX_S)

    async def _make(self) -> None:
        self._name = NUID().next().decode()
        self._delivered = 0
        self._reconnects = self._nc.stats["reconnects"]
        await self._js.add_consumer(self._stream, config=self._config())
        feed = PullFeed(
            self._nc, stream=self._stream, consumer=self._name, batch=BATCH, expires_s=_EXPIRES_S
        )
        await feed.start()
        self._feed = feed

    def _config(self) -> api.ConsumerConfig:
        after = self._last or self._after  # where to go on from (None: each key's last)
        policy = api.DeliverPolicy.LAST_PER_SUBJECT
        if after is not None:
            policy = api.DeliverPolicy.BY_START_SEQUENCE
        several = len(self._subjects) > 1
        return api.ConsumerConfig(
            name=self._name,
            deliver_policy=policy,
            opt_start_seq=None if after is None else after + 1,
            ack_policy=api.AckPolicy.NONE,
            filter_subject=None if several else self._subjects[0],
            filter_subjects=self._subjects if several else None,
            inactive_threshold=_INACTIVE_S,
            mem_storage=True,
            num_replicas=1,
        )

    async def _drop(self) -> None:
        """Stop the current pulls and delete their consumer, if NATS answers at once."""
        feed, self._feed = self._feed, None
        if feed is None:
            return
        await feed.close()
        if not self._nc.is_connected:
            return  # the server drops it once it is inactive
        with contextlib.suppress(nats.errors.Error, nats.js.errors.Error, TimeoutError):
            async with asyncio.timeout(1.0):
                await self._js.delete_consumer(self._stream, self._name)
