"""Whether each timer loop of a service still ticks: what the loops report, and the lateness rule.

A consume loop is watched by the work it holds (bus/progress.py); a timer loop (a lease
renewal, a heartbeat writer, requeue timers) holds none between ticks, so it says when it
means to tick next instead: `Pulse.beat(next_in_s)` at each tick, None when nothing is due
(a timer with no timer set waits for a change, and is not late however long it waits). The
watchdog (bus/watchdog.py) samples every pulse now and then and applies `assess_pulse`, a pure
rule with the caller's clock: a pulse is stalled when it is past its due time, nothing moved
for `stall_s`, and NATS is reachable (a loop waiting for NATS is an outage, not a stall).
Work that runs long in a tick says it still moves with `progress.advanced()` (a Kubernetes
call that retries does), inside `Pulse.handling()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import NamedTuple

from muster.bus.progress import Handling


class Pulse:
    """One timer loop's side of the watchdog: when it ticked and when it means to tick next."""

    def __init__(
        self, name: str, *, board: Pulses | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.name = name
        self._board = board
        self._clock = clock
        self.beats = 0  # ticks and advances, ever
        self.due: float | None = None  # when the next tick is due (the clock's); None: not due
        self._loop: asyncio.Task[object] | None = None  # the task that beats it

    def beat(self, next_in_s: float | None) -> None:
        """The loop ticked; it ticks again within `next_in_s` seconds (None: when something
        changes, however long that takes)."""
        self.beats += 1
        self.due = None if next_in_s is None else self._clock() + next_in_s
        with contextlib.suppress(RuntimeError):  # no loop running: a test's fake clock
            self._loop = asyncio.current_task()

    @property
    def ended(self) -> bool:
        """Whether the task that beat it last has ended (cancelled for a rebuild, a restart
        of its loop, a shutdown): a timer that no longer runs is not late."""
        return self._loop is not None and self._loop.done()

    def advance(self, token: int) -> None:
        """Work in the current tick moved on (`progress.advanced`): not stuck."""
        self.beats += 1

    def handling(self) -> Handling:
        """While the body runs, `progress.advanced()` advances this pulse."""
        return Handling(self, 0)

    def close(self) -> None:
        """The loop ended: no longer watched."""
        if self._board is not None:
            self._board.forget(self)


class Pulses:
    """Every timer loop's `Pulse` in a service; the watchdog reads them."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._pulses: dict[str, Pulse] = {}
        self._clock = clock

    def pulse(self, name: str) -> Pulse:
        """A new pulse for timer loop `name` (replacing one of the same name: the loop started
        over), not due until its first beat."""
        pulse = self._pulses[name] = Pulse(name, board=self, clock=self._clock)
        return pulse

    def forget(self, pulse: Pulse) -> None:
        if self._pulses.get(pulse.name) is pulse:
            del self._pulses[pulse.name]

    def pulses(self) -> list[Pulse]:
        """The pulses of the timer loops still running (those whose task ended are dropped)."""
        for ended in [p for p in self._pulses.values() if p.ended]:
            self.forget(ended)
        return sorted(self._pulses.values(), key=lambda p: p.name)


class PulseWatch(NamedTuple):
    """What the rule remembers of a pulse between looks."""

    at: float  # when it was last assessed (the caller's clock, seconds)
    beats: int
    stuck_s: float  # time counted past due with nothing moving


def assess_pulse(
    before: PulseWatch | None,
    *,
    beats: int,
    due: float | None,
    now: float,
    connected: bool,
    max_step_s: float,
) -> PulseWatch:
    """The pulse's `PulseWatch` at `now`, given the one before (None: first look).

    Stuck time grows by the time past `due` since the last look (at most `max_step_s`: time
    the event loop was blocked is not the timer's) while it did not beat or advance; it is
    back to 0 once it moves or is not due, and stays as it is while NATS is unreachable.
    """
    if before is None:
        return PulseWatch(now, beats, 0.0)
    if due is None or now < due or beats != before.beats:
        return PulseWatch(now, beats, 0.0)
    if not connected:
        return PulseWatch(now, beats, before.stuck_s)
    step_s = min(max(now - max(before.at, due), 0.0), max_step_s)
    return PulseWatch(now, beats, before.stuck_s + step_s)


def late(watch: PulseWatch, *, stall_s: float) -> bool:
    """Whether `watch` is a stall: stuck past due for `stall_s` (0: never)."""
    return stall_s > 0 and watch.stuck_s >= stall_s
