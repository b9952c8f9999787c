"""A Kubernetes call that retries is progress for the watchdog (bus/progress.py): each answer
of a busy API server advances the consume loop's message (or the timer's pulse) it runs for,
so a call retrying for a minute is slow, not stalled."""

from __future__ import annotations

from muster.bus.progress import Progress
from muster.bus.pulse import Pulses
from muster.cluster.kube.retry import Backoff, UnavailableError, retrying

BACKOFF = Backoff(initial_s=0.0, max_s=0.0, attempts=4)


class BusyApiServer:
    """Answers 503 `busy` times, then OK."""

    def __init__(self, busy: int) -> None:
        self.busy = busy

    async def __call__(self) -> str:
        if self.busy:
            self.busy -= 1
            raise UnavailableError("Pod/ml/a", "ServiceUnavailable", "busy", retry_after_s=None)
        return "ok"


async def test_each_retry_advances_the_message_in_hand() -> None:
    tracker = Progress().track("binder", stream="MUSTER", consumer="binder", max_ack_pending=4)
    tracker.began(7)
    with tracker.handling(7):
        assert await retrying(BusyApiServer(3), backoff=BACKOFF) == "ok"
    assert tracker.oldest == (7, 3)  # three answers, three moves


async def test_each_retry_advances_the_timer_it_runs_for() -> None:
    pulse = Pulses().pulse("gangpermit-heartbeat")
    pulse.beat(1.0)
    with pulse.handling():
        await retrying(BusyApiServer(2), backoff=BACKOFF)
    assert pulse.beats == 3  # its beat, and two answers


async def test_a_call_answered_at_once_moves_nothing() -> None:
    tracker = Progress().track("binder", stream="MUSTER", consumer="binder", max_ack_pending=4)
    tracker.began(7)
    with tracker.handling(7):
        await retrying(BusyApiServer(0), backoff=BACKOFF)
    assert tracker.oldest == (7, 0)
