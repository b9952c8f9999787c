"""Whether each consume loop still gets its work done: what the loops report, and the stall rule.

A consume loop reports each message it takes in hand (`Tracker.began`) and lets go of
(`Tracker.ended`); work that runs long says it still advances (`advanced`, which the stream
replay calls for every event it reads inside a handler). The watchdog (bus/watchdog.py)
samples every tracker now and then into a `Look` and applies `assess`, a pure rule with the
caller's clock: a consumer is stalled when work waits for it (a message in hand, or the
server holding undelivered ones it could deliver) and nothing moved for `stall_s`.

- Idle is not stalled: with nothing in hand and nothing pending at the server, nothing waits.
- A long handler is not misread as long as it moves: the oldest message in hand counts as
  stuck only while neither it changes nor it `advanced`; a rebuild that reads the stream
  advances with every event it reads. Time the event loop itself was blocked (a handler
  computing without awaiting) counts for at most `max_step_s` per look: a busy loop is not
  a stalled one, and the watchdog could not have answered meanwhile anyway.
- A replica whose durable is saturated by another replica's unacknowledged messages (the
  server delivers no more until they are answered) waits for that replica, not for itself.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import NamedTuple, Protocol, TypeVar

T = TypeVar("T")


class Advancing(Protocol):
    """What `advanced()` moves: a consume loop's `Tracker`, or a timer's `pulse.Pulse`."""

    def advance(self, token: int) -> None: ...


_current: contextvars.ContextVar[tuple[Advancing, int] | None] = contextvars.ContextVar(
    "muster_progress_current", default=None
)


class Wording(NamedTuple):
    """How the watchdog's log names a tracked loop and what it holds."""

    loop: str  # what the loop is: "consumer"
    item: str  # what it holds: "message"
    token: str  # what a token counts: "sequence"
    moves: str  # said once it moves again: "moves again"


CONSUMER = Wording("consumer", "message", "sequence", "moves again")


class Tracker:
    """What one consume loop has in hand and has finished; the loop's side of the watchdog.

    `stream` and `consumer` name the JetStream consumer whose undelivered count the watchdog
    reads when nothing is in hand (`consumer` may change: a replay's reader is made anew; "":
    none yet). `wording`: how the watchdog tells its stall (a gateway's Submits are calls in
    hand, not a consumer's messages).
    """

    def __init__(
        self,
        name: str,
        *,
        stream: str,
        consumer: str,
        max_ack_pending: int,
        board: Progress | None = None,
        wording: Wording = CONSUMER,
    ) -> None:
        self.name = name
        self.wording = wording
        self._board = board
        self.stream = stream
        self.consumer = consumer
        self.max_ack_pending = max_ack_pending
        self.finished = 0  # messages let go of, ever
        self._in_hand: dict[int, int] = {}  # token -> times it advanced; oldest first

    # `began` and `ended` run for every message of every loop: plain dict operations, no
    # method calls (`setdefault` and `pop` were two calls more per message).
    def began(self, token: int) -> None:
        """Message (or batch) `token` (its stream sequence) is in hand."""
        if token not in self._in_hand:
            self._in_hand[token] = 0

    def ended(self, token: int) -> None:
        """Message `token` was answered (acked, naked, dead-lettered or given back)."""
        if token in self._in_hand:
            del self._in_hand[token]
            self.finished += 1

    def advance(self, token: int) -> None:
        """Work on message `token` moved on (a long handler is not stuck)."""
        if token in self._in_hand:
            self._in_hand[token] += 1

    def clear(self) -> None:
        """The loop stopped: what it held is given back."""
        self._in_hand.clear()

    def close(self) -> None:
        """The loop ended: no longer watched."""
        self.clear()
        if self._board is not None:
            self._board.forget(self)

    @property
    def oldest(self) -> tuple[int, int] | None:
        """The oldest message in hand and how often it advanced; None when none is."""
        for token, moves in self._in_hand.items():
            return token, moves
        return None

    @property
    def in_hand(self) -> int:
        return len(self._in_hand)

    def handling(self, token: int) -> Handling:
        """While the body runs, `advanced()` (in this task or tasks it starts) advances `token`."""
        return Handling(self, token)

    def cursor(self) -> Cursor:
        """A `Cursor` for one worker task of the loop (a consume loop's lane)."""
        return Cursor(self)


class Cursor:
    """What one worker task of a loop holds, a message at a time: `enter()` once in the task,
    then `token` is set to each message's while it is handled (0 between messages), and
    `advanced()` in the task, or in tasks it starts, advances the token in hand.

    The same as a `Tracker.handling` per message (five calls: a context entered and left)
    for an attribute store. A task that a handler leaves running after it returned would
    advance the worker's next message; handlers' tasks end with them.
    """

    __slots__ = ("_tracker", "token")

    def __init__(self, tracker: Tracker) -> None:
        self._tracker = tracker
        self.token = 0

    def enter(self) -> None:
        """`advanced()` in the calling task (a worker's own) advances this cursor from now on."""
        _current.set((self, 0))

    def advance(self, token: int) -> None:
        if self.token:
            self._tracker.advance(self.token)


class Handling:
    """`Tracker.handling`: a plain context manager (a generator-based one costs a few times
    as much, paid per message)."""

    __slots__ = ("_reset", "_what")

    def __init__(self, tracker: Advancing, token: int) -> None:
        self._what = (tracker, token)

    def __enter__(self) -> None:
        self._reset = _current.set(self._what)

    def __exit__(self, *_: object) -> None:
        _current.reset(self._reset)


async def tracked(
    items: AsyncIterator[T], tracker: Tracker, sequence_of: Callable[[T], int]
) -> AsyncGenerator[T, None]:
    """`items`, each in hand for `tracker` (by `sequence_of` it) until the next is asked for;
    the tracker is closed when they end (a reader of a stream or a feed, not a consume loop)."""
    try:
        async for item in items:
            token = sequence_of(item)
            tracker.began(token)
            yield item
            tracker.ended(token)
    finally:
        tracker.close()


def advanced() -> None:
    """The handler running in this context moved on (a long rebuild reads an event, ...);
    nothing when no consume loop runs it."""
    current = _current.get()
    if current is not None:
        current[0].advance(current[1])


class Progress:
    """Every consume loop's `Tracker` in a service; the watchdog reads them."""

    def __init__(self) -> None:
        self._trackers: dict[str, Tracker] = {}

    def track(
        self,
        name: str,
        *,
        stream: str,
        consumer: str,
        max_ack_pending: int,
        wording: Wording = CONSUMER,
    ) -> Tracker:
        """A new tracker for loop `name` (replacing one of the same name: the loop started
        over)."""
        tracker = Tracker(
            name,
            stream=stream,
            consumer=consumer,
            max_ack_pending=max_ack_pending,
            board=self,
            wording=wording,
        )
        self._trackers[name] = tracker
        return tracker

    def forget(self, tracker: Tracker) -> None:
        """The loop ended: no longer watched."""
        if self._trackers.get(tracker.name) is tracker:
            del self._trackers[tracker.name]

    def trackers(self) -> list[Tracker]:
        return sorted(self._trackers.values(), key=lambda t: t.name)


class Look(NamedTuple):
    """One sample of a tracker (and, with nothing in hand, of its consumer at the server)."""

    finished: int
    oldest: tuple[int, int] | None  # (token, moves) of the oldest message in hand
    in_hand: int
    pending: int | None = None  # undelivered at the server; None: not read (or not readable)
    saturated: bool = False  # the server delivers no more until others answer theirs
    connected: bool = True


class Watch(NamedTuple):
    """What the rule remembers of a tracker between looks."""

    at: float  # when it was last assessed (the caller's clock, seconds)
    finished: int
    oldest: tuple[int, int] | None
    stuck_s: float  # time counted while work waited and nothing moved
    waiting: int  # messages waiting at the last look (in hand, else pending at the server)


def assess(before: Watch | None, look: Look, *, now: float, max_step_s: float) -> Watch:
    """The tracker's `Watch` after `look` at `now`, given the one before (None: first look).

    Moving: the oldest message in hand changed or advanced, or, with none in hand, one was
    finished or taken since. Waiting: a message in hand, or undelivered ones the server
    could hand over. Stuck time grows by the time since the last look (at most `max_step_s`)
    while waiting and not moving; it is back to 0 once moving or not waiting, and stays as
    it is while NATS is unreachable (waiting for NATS is an outage, not a stall).
    """
    if look.oldest is not None:
        waiting = look.in_hand
    elif look.pending and not look.saturated:
        waiting = look.pending
    else:
        waiting = 0
    if before is None:
        return Watch(now, look.finished, look.oldest, 0.0, waiting)
    if look.oldest is not None:
        moved = look.oldest != before.oldest
    else:
        moved = look.finished != before.finished or before.oldest is not None
    step_s = min(max(now - before.at, 0.0), max_step_s)
    if not look.connected:
        stuck_s = before.stuck_s
    elif moved or not waiting:
        stuck_s = 0.0
    else:
        stuck_s = before.stuck_s + step_s
    return Watch(now, look.finished, look.oldest, stuck_s, waiting)


def stalled(watch: Watch, *, stall_s: float) -> bool:
    """Whether `watch` is a stall: stuck for `stall_s` (0: never)."""
    return stall_s > 0 and watch.waiting > 0 and watch.stuck_s >= stall_s
