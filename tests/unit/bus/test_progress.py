"""The stall rule (bus/progress.py) on a fake clock: what is a stall, what is idle, and what a
long handler, a blocked event loop, a saturated durable and a NATS outage count for."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from muster.bus.progress import Look, Progress, Tracker, Watch, advanced, assess, stalled

STALL_S = 60.0
EVERY_S = 10.0  # the watchdog looks every 10 s, so a step counts for at most 20 s


def tracker() -> Tracker:
    return Progress().track("binder", stream="MUSTER", consumer="binder", max_ack_pending=4)


def look(
    t: Tracker, *, pending: int | None = None, saturated: bool = False, connected: bool = True
) -> Look:
    """What the watchdog sees of `t`, with the server's side as given."""
    return Look(
        finished=t.finished,
        oldest=t.oldest,
        in_hand=t.in_hand,
        pending=pending,
        saturated=saturated,
        connected=connected,
    )


def judge(
    t: Tracker,
    *,
    until_s: float,
    between: Callable[[], None] = lambda: None,
    pending: int | None = None,
    saturated: bool = False,
    connected: bool = True,
) -> tuple[Watch, bool]:
    """Look at `t` every `EVERY_S` seconds from 0 to `until_s` (calling `between` before each
    look after the first): the last watch, and whether any look said stalled."""
    watch: Watch | None = None
    ever = False
    now = 0.0
    while now <= until_s:
        if watch is not None:
            between()
        seen = look(t, pending=pending, saturated=saturated, connected=connected)
        watch = assess(watch, seen, now=now, max_step_s=2 * EVERY_S)
        ever = ever or stalled(watch, stall_s=STALL_S)
        now += EVERY_S
    assert watch is not None
    return watch, ever


def test_an_idle_consumer_is_never_stalled() -> None:
    watch, ever = judge(tracker(), until_s=3600, pending=0)
    assert (watch.waiting, watch.stuck_s, ever) == (0, 0.0, False)


def test_a_message_in_hand_that_does_not_move_is_a_stall_once_the_window_has_passed() -> None:
    t = tracker()
    t.began(7)
    watch, ever = judge(t, until_s=STALL_S - EVERY_S)
    assert (watch.stuck_s, ever) == (STALL_S - EVERY_S, False)  # one look short of it
    watch, ever = judge(t, until_s=STALL_S)
    assert (watch.waiting, watch.stuck_s, ever) == (1, STALL_S, True)
    t.ended(7)
    after = assess(watch, look(t, pending=0), now=STALL_S + EVERY_S, max_step_s=2 * EVERY_S)
    assert not stalled(after, stall_s=STALL_S)  # answered: nothing waits any more


def test_a_long_handler_that_advances_is_not_stalled() -> None:
    t = tracker()
    t.began(7)
    _, ever = judge(t, until_s=10 * STALL_S, between=lambda: t.advance(7))
    assert not ever


def test_messages_that_keep_coming_and_going_are_not_a_stall() -> None:
    t = tracker()
    seq = [1]

    def next_message() -> None:
        t.ended(seq[0])
        seq[0] += 1
        t.began(seq[0])

    t.began(1)
    _, ever = judge(t, until_s=10 * STALL_S, between=next_message)
    assert not ever


def test_a_hung_message_is_a_stall_while_other_lanes_finish_theirs() -> None:
    t = tracker()
    t.began(1)  # hangs
    seq = [1]

    def another_lane() -> None:
        seq[0] += 1
        t.began(seq[0])
        t.ended(seq[0])

    _, ever = judge(t, until_s=STALL_S, between=another_lane)
    assert ever


def test_a_blocked_event_loop_counts_for_at_most_two_looks() -> None:
    t = tracker()
    t.began(7)
    first = assess(None, look(t), now=0.0, max_step_s=2 * EVERY_S)
    after_block = assess(first, look(t), now=300.0, max_step_s=2 * EVERY_S)
    assert after_block.stuck_s == 2 * EVERY_S
    assert not stalled(after_block, stall_s=STALL_S)


def test_undelivered_messages_and_nothing_taken_is_a_stall_unless_others_saturate_it() -> None:
    _, ever = judge(tracker(), until_s=STALL_S, pending=5)
    assert ever  # a lost subscription: the server holds messages, nothing comes
    _, ever = judge(tracker(), until_s=10 * STALL_S, pending=5, saturated=True)
    assert not ever  # another replica's messages fill max_ack_pending: its stall, not ours


def test_time_without_nats_is_not_counted() -> None:
    t = tracker()
    t.began(7)
    watch, ever = judge(t, until_s=10 * STALL_S, connected=False)
    assert (watch.stuck_s, ever) == (0.0, False)


def test_with_stall_seconds_0_nothing_is_ever_a_stall() -> None:
    t = tracker()
    t.began(7)
    watch, _ = judge(t, until_s=10 * STALL_S)
    assert not stalled(watch, stall_s=0)


async def test_advanced_moves_the_message_handled_in_this_context_and_its_tasks() -> None:
    t = tracker()
    t.began(3)
    t.began(4)
    advanced()  # outside any handler: nothing
    with t.handling(3):
        advanced()
        await asyncio.create_task(_advance())  # a task the handler starts inherits it
    assert t.oldest == (3, 2)
    t.ended(3)
    assert (t.oldest, t.finished) == ((4, 0), 1)


async def _advance() -> None:
    advanced()


def test_a_tracker_made_again_replaces_the_old_and_forgetting_the_old_keeps_the_new() -> None:
    progress = Progress()
    old = progress.track("admission-0", stream="MUSTER", consumer="admission-0", max_ack_pending=1)
    new = progress.track("admission-0", stream="MUSTER", consumer="admission-0", max_ack_pending=1)
    progress.forget(old)
    assert progress.trackers() == [new]
    progress.forget(new)
    assert progress.trackers() == []
