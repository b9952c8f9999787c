"""The progress watchdog of a service: it looks at every consume loop's tracker (bus/progress.py)
and every timer loop's pulse (bus/pulse.py) now and then, applies the stall rules and tells the
verdict to the service's liveness, its log (one line when a loop stalls, one when it moves
again) and its metrics.

`run_service` runs it once the bus is connected; it judges only while the service is ready
(before, a start is judged by the startup and readiness probes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TypeVar

import nats.errors

from muster.bus.connection import Bus
from muster.bus.progress import Look, Tracker, Watch, assess, stalled
from muster.bus.pulse import PulseWatch, assess_pulse, late

log = logging.getLogger(__name__)

W = TypeVar("W")

LOOKS_PER_WINDOW = 6  # looks per stall window: a stall is told within 1/6 of it
MIN_LOOK_EVERY_S = 0.1


async def watch_progress(
    bus: Bus,
    *,
    stall_s: float,
    alive: Callable[[bool], None],
    ready: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Judge every consume loop and timer loop of `bus` every `stall_s / LOOKS_PER_WINDOW`
    seconds until cancelled; `alive(False)` while one is stalled, `alive(True)` once none is.
    `ready()`: whether the service is ready (judged only then)."""
    every_s = max(stall_s / LOOKS_PER_WINDOW, MIN_LOOK_EVERY_S)
    watches: dict[str, Watch] = {}
    timers: dict[str, PulseWatch] = {}
    stuck: set[str] = set()
    while True:
        await asyncio.sleep(every_s)
        trackers = bus.progress.trackers() if ready() else []
        for tracker in trackers:
            before = watches.get(tracker.name)
            look = await _look(bus, tracker, before)
            now = watches[tracker.name] = assess(before, look, now=clock(), max_step_s=2 * every_s)
            _tell(bus, tracker, now, stalled=stalled(now, stall_s=stall_s), stuck=stuck)
        pulses = bus.pulses.pulses() if ready() else []
        for pulse in pulses:
            watch = timers[pulse.name] = assess_pulse(
                timers.get(pulse.name),
                beats=pulse.beats,
                due=pulse.due,
                now=clock(),
                connected=bus.nc.is_connected,
                max_step_s=2 * every_s,
            )
            _tell_late(bus, pulse.name, watch, late=late(watch, stall_s=stall_s), stuck=stuck)
        _forget(watches, {t.name for t in trackers}, stuck)
        _forget(timers, {p.name for p in pulses}, stuck)
        alive(not stuck)


def _forget(watches: dict[str, W], names: set[str], stuck: set[str]) -> None:
    """Drop what is remembered of loops that are no longer watched."""
    for gone in set(watches) - names:
        del watches[gone]
        stuck.discard(gone)


async def _look(bus: Bus, tracker: Tracker, before: Watch | None) -> Look:
    """A sample of `tracker`; the server's undelivered count is read only when it matters:
    nothing in hand, and nothing finished since the last look."""
    look = Look(
        finished=tracker.finished,
        oldest=tracker.oldest,
        in_hand=tracker.in_hand,
        connected=bus.nc.is_connected,
    )
    if look.oldest is not None or before is None or look.finished != before.finished:
        return look
    if not look.connected or not tracker.consumer:
        return look
    try:
        info = await bus.js.consumer_info(tracker.stream, tracker.consumer)
    except (nats.errors.Error, TimeoutError) as exc:  # gone or not answering: not known now
        log.debug("progress of %s: consumer not read: %r", tracker.name, exc)
        return look
    return look._replace(
        pending=int(info.num_pending or 0),
        saturated=info.num_ack_pending >= tracker.max_ack_pending,
    )


def _tell(bus: Bus, tracker: Tracker, now: Watch, *, stalled: bool, stuck: set[str]) -> None:
    """Log a change of verdict once, and keep the metrics."""
    if bus.metrics is not None:
        bus.metrics.progress(tracker.name, stuck_s=now.stuck_s, stalled=stalled)
    words = tracker.wording
    if stalled and tracker.name not in stuck:
        stuck.add(tracker.name)
        held = f"{words.token} {now.oldest[0]} in hand" if now.oldest else "nothing delivered"
        log.error(
            "%s %s stalled: %d %s%s waiting, no progress for %.0fs (%s); liveness NOT_SERVING",
            words.loop, tracker.name, now.waiting, words.item, "" if now.waiting == 1 else "s",
            now.stuck_s, held, extra={"consumer": tracker.name},
        )  # fmt: skip
    elif not stalled and tracker.name in stuck:
        stuck.discard(tracker.name)
        log.warning(
            "%s %s %s", words.loop, tracker.name, words.moves, extra={"consumer": tracker.name}
        )


def _tell_late(bus: Bus, name: str, watch: PulseWatch, *, late: bool, stuck: set[str]) -> None:
    """`_tell` for a timer loop."""
    if bus.metrics is not None:
        bus.metrics.progress(name, stuck_s=watch.stuck_s, stalled=late)
    if late and name not in stuck:
        stuck.add(name)
        log.error(
            "timer %s stalled: no tick for %.0fs past its due time; liveness NOT_SERVING",
            name, watch.stuck_s, extra={"timer": name},
        )  # fmt: skip
    elif not late and name in stuck:
        stuck.discard(name)
        log.warning("timer %s ticks again", name, extra={"timer": name})
