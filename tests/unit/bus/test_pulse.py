"""The lateness rule of timer loops (bus/pulse.py) on a fake clock: a timer past its due time
with nothing moving is a stall; one waiting for a change, one whose work advances (a
Kubernetes call retrying), a blocked event loop and a NATS outage are not, or not more."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from muster.bus.progress import advanced
from muster.bus.pulse import Pulse, Pulses, PulseWatch, assess_pulse, late

STALL_S = 60.0
EVERY_S = 10.0  # the watchdog looks every 10 s, so a step counts for at most 20 s


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def judge(
    clock: Clock,
    pulse: Pulse,
    *,
    until_s: float,
    between: Callable[[], None] = lambda: None,
    connected: bool = True,
    watch: PulseWatch | None = None,
) -> PulseWatch:
    """Look at `pulse` every EVERY_S until `until_s` (calling `between` before each look),
    going on from `watch`."""
    while True:
        between()
        watch = assess_pulse(
            watch,
            beats=pulse.beats,
            due=pulse.due,
            now=clock.now,
            connected=connected,
            max_step_s=2 * EVERY_S,
        )
        if clock.now >= until_s:
            return watch
        clock.now += EVERY_S


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_timer_past_its_due_time_for_the_stall_window_is_late(clock: Clock) -> None:
    pulse = Pulses(clock=clock).pulse("lease")
    pulse.beat(5.0)  # due at 5 s, never ticks again
    watch = judge(clock, pulse, until_s=60.0)
    assert not late(watch, stall_s=STALL_S)  # 55 s past due
    clock.now += EVERY_S
    assert late(judge(clock, pulse, until_s=70.0, watch=watch), stall_s=STALL_S)


def test_a_timer_that_ticks_on_time_is_never_late(clock: Clock) -> None:
    pulse = Pulses(clock=clock).pulse("lease")

    def tick() -> None:
        pulse.beat(EVERY_S)

    assert not late(judge(clock, pulse, until_s=600.0, between=tick), stall_s=STALL_S)


def test_a_timer_waiting_for_a_change_is_never_late(clock: Clock) -> None:
    pulse = Pulses(clock=clock).pulse("requeue")
    pulse.beat(None)  # no timer set: it waits for a round to set one
    assert not late(judge(clock, pulse, until_s=3600.0), stall_s=STALL_S)


def test_a_tick_whose_work_advances_is_not_late(clock: Clock) -> None:
    pulse = Pulses(clock=clock).pulse("heartbeat")
    pulse.beat(1.0)

    def retry() -> None:
        with pulse.handling():
            advanced()  # what a Kubernetes call retrying says at each answer

    assert not late(judge(clock, pulse, until_s=600.0, between=retry), stall_s=STALL_S)


def test_a_blocked_event_loop_counts_for_at_most_two_looks(clock: Clock) -> None:
    pulse = Pulses(clock=clock).pulse("lease")
    pulse.beat(0.0)
    first = judge(clock, pulse, until_s=0.0)
    clock.now = 1000.0  # the loop was blocked: the watchdog could not look meanwhile
    after = assess_pulse(
        first, beats=pulse.beats, due=pulse.due, now=clock.now, connected=True, max_step_s=20.0
    )
    assert after.stuck_s == 20.0


def test_nats_away_holds_the_stuck_time_where_it_was(clock: Clock) -> None:
    pulse = Pulses(clock=clock).pulse("lease")
    pulse.beat(0.0)
    watch = judge(clock, pulse, until_s=600.0, connected=False)
    assert watch.stuck_s == 0.0


def test_a_closed_pulse_is_no_longer_watched(clock: Clock) -> None:
    pulses = Pulses(clock=clock)
    pulse = pulses.pulse("lease")
    again = pulses.pulse("lease")  # the loop started over
    pulse.close()
    assert pulses.pulses() == [again]
    again.close()
    assert pulses.pulses() == []


async def test_a_timer_whose_task_ended_is_no_longer_watched() -> None:
    """Admission's timers end with their life at a Reown: the rebuild that follows may last
    past their due time, and is no stall of theirs."""
    pulses = Pulses()

    async def loop() -> None:
        pulses.pulse("admission-timers").beat(0.0)

    await asyncio.create_task(loop())
    assert pulses.pulses() == []
