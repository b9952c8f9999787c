"""binder.pacing: bounded concurrent binds, and binds spaced by the rate limit."""

from __future__ import annotations

import asyncio

import pytest

from muster.binder.pacing import BindPacer

pytestmark = pytest.mark.timeout(10)


class FakeTime:
    """A clock that a sleep moves forward, recording the sleeps."""

    def __init__(self) -> None:
        self.now_s = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now_s

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_s += seconds


async def test_rate_limit_spaces_bind_starts() -> None:
    t = FakeTime()
    pacer = BindPacer(max_concurrent=1, per_second=4, clock_s=t.clock, sleep=t.sleep)
    starts = []
    for _ in range(3):
        async with pacer.slot():
            starts.append(t.now_s)
    assert starts == [100.0, 100.25, 100.5]


async def test_no_rate_limit_never_sleeps() -> None:
    t = FakeTime()
    pacer = BindPacer(max_concurrent=2, per_second=0, clock_s=t.clock, sleep=t.sleep)
    for _ in range(5):
        async with pacer.slot():
            pass
    assert t.sleeps == []


async def test_at_most_max_concurrent_binds_run_at_once() -> None:
    pacer = BindPacer(max_concurrent=3, per_second=0)
    running = 0
    most = 0
    release = asyncio.Event()
    full = asyncio.Event()

    async def bind() -> None:
        nonlocal running, most
        async with pacer.slot():
            running += 1
            most = max(most, running)
            if running == 3:
                full.set()
            await release.wait()
            running -= 1

    tasks = [asyncio.create_task(bind()) for _ in range(10)]
    await full.wait()
    for _ in range(5):
        await asyncio.sleep(0)  # let any extra bind try to start
    assert running == 3
    release.set()
    await asyncio.gather(*tasks)
    assert most == 3


@pytest.mark.parametrize(("concurrent", "rate"), [(0, 0.0), (1, -1.0)])
def test_refuses_bad_limits(concurrent: int, rate: float) -> None:
    with pytest.raises(ValueError, match="must be >= "):
        BindPacer(max_concurrent=concurrent, per_second=rate)
