"""`KeepAlive`: a consume loop's messages held long are told to the server still in progress.

JetStream redelivers a message left unanswered for the consumer's ack wait; a message still
in hand (its handler running long, or queued on its lane behind one that does) must not be,
so the server is told it is in progress (`+WPI`) before then. One timer per consume loop
ticks every sixth of the ack wait and tells every message held since the tick before; a
message is told at most a third of the ack wait after it was taken (as the timer per message
was, after its handler started), then every sixth.

Per message this is a dict entry put and removed. A timer per message (armed when its handler
started, cancelled when it ended) cost a timer made and cancelled and two coroutines for each
one, although most handlers end within milliseconds; and a message waiting on its lane behind
a long handler was not kept alive at all, so the server delivered it again meanwhile.
"""

from __future__ import annotations

import asyncio
import logging

import nats.errors
from nats.aio.msg import Msg

log = logging.getLogger(__name__)

TICKS_PER_ACK_WAIT = 6  # a message is told at most 2 ticks after it was taken: a third


class KeepAlive:
    """The messages a consume loop holds (`held`: stream sequence -> message; the loop puts
    and removes them itself) and the timer that keeps them alive. `start` once the loop
    runs, `stop` when it ends."""

    def __init__(self, ack_wait_s: float) -> None:
        self.held: dict[int, Msg] = {}
        self._every_s = ack_wait_s / TICKS_PER_ACK_WAIT
        self._before: set[int] = set()  # held at the last tick
        self._timer: asyncio.TimerHandle | None = None
        self._telling: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self._every_s, self._tick)

    def stop(self) -> None:
        """No more ticks; what is being told is abandoned (the loop answers its messages).
        Not awaited: the loop may be stopping because it was cancelled twice."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in list(self._telling):
            task.cancel()

    def _tick(self) -> None:
        held, before = self.held, self._before
        long = [msg for seq, msg in held.items() if seq in before]
        self._before = set(held)
        loop = asyncio.get_running_loop()
        if long:
            task = loop.create_task(_tell(long))
            self._telling.add(task)
            task.add_done_callback(self._telling.discard)
        self._timer = loop.call_later(self._every_s, self._tick)


async def _tell(msgs: list[Msg]) -> None:
    """`+WPI` for each of `msgs`; if the connection fails, the server redelivers: log."""
    for msg in msgs:
        try:
            await msg.in_progress()
        except nats.errors.Error as exc:
            log.warning("could not tell the server a message is in progress: %r", exc)
