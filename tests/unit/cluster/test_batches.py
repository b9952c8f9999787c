"""cluster.batches: many cluster calls a batch at a time, the rest of the loop running between."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import pytest

from muster.bus.progress import Progress
from muster.cluster.batches import batches, run_in_batches, settle_in_batches

pytestmark = pytest.mark.timeout(10)


class Calls:
    """Records the calls made, those running at once, and the items made so far."""

    def __init__(self, *, failing: frozenset[int] = frozenset()) -> None:
        self.made = 0
        self.done: list[int] = []
        self.running = 0
        self.most_running = 0
        self.most_held = 0  # items made and not yet done with
        self.failing = failing
        self.log: list[str] = []

    def items(self, n: int) -> Iterator[int]:
        for i in range(n):
            self.made += 1
            yield i

    async def call(self, item: int) -> None:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        self.most_held = max(self.most_held, self.made - len(self.done))
        self.log.append(f"call {item}")
        await asyncio.sleep(0)
        self.running -= 1
        self.done.append(item)
        if item in self.failing:
            raise ValueError(f"item {item} refused")


def test_batches_are_taken_as_asked_for() -> None:
    calls = Calls()
    it = batches(calls.items(10), 4)
    assert next(it) == [0, 1, 2, 3]
    assert calls.made == 4
    assert list(it) == [[4, 5, 6, 7], [8, 9]]
    with pytest.raises(ValueError, match="batch size must be >= 1, got 0"):
        next(batches([1], 0))


async def test_each_batch_runs_side_by_side_and_only_a_batch_is_held() -> None:
    calls = Calls()
    assert await settle_in_batches(calls.items(1000), calls.call, size=16) == []
    assert sorted(calls.done) == list(range(1000))
    assert calls.most_running == 16
    assert calls.most_held <= 16  # the generator is drawn from a batch at a time


async def test_what_else_is_ready_runs_between_batches() -> None:
    # A side task ready all along (a health answer, another workload's event): with every
    # call made at once it would wait for all 40; here it runs after each batch of 8.
    calls = Calls()
    stop = asyncio.Event()

    async def side() -> None:
        while not stop.is_set():
            calls.log.append("side")
            await asyncio.sleep(0)

    task = asyncio.create_task(side())
    await asyncio.sleep(0)
    await run_in_batches(calls.items(40), calls.call, size=8)
    stop.set()
    await task
    runs: list[int] = []  # calls started between two turns of the side task
    for entry in calls.log:
        if entry == "side":
            runs.append(0)
        elif runs:
            runs[-1] += 1
    assert max(runs) == 8
    assert sum(runs) == 40


async def test_settle_makes_every_call_and_returns_the_failures_in_order() -> None:
    calls = Calls(failing=frozenset({3, 9}))
    failed = await settle_in_batches(calls.items(12), calls.call, size=4)
    assert [(item, str(err)) for item, err in failed] == [
        (3, "item 3 refused"),
        (9, "item 9 refused"),
    ]
    assert sorted(calls.done) == list(range(12))


async def test_run_raises_the_first_failure_after_its_batch_and_starts_no_later_batch() -> None:
    calls = Calls(failing=frozenset({5, 6}))
    with pytest.raises(ValueError, match="item 5 refused"):
        await run_in_batches(calls.items(12), calls.call, size=4)
    assert sorted(calls.done) == [0, 1, 2, 3, 4, 5, 6, 7]  # its batch ended; none after


async def test_a_single_call_is_awaited_in_place() -> None:
    calls = Calls(failing=frozenset({0}))
    failed = await settle_in_batches(calls.items(1), calls.call)
    assert [item for item, _ in failed] == [0]


async def test_batches_make_no_async_generator() -> None:
    # What the pod path pays per workload: the event loop registers and finalizes every async
    # generator made, and a sequence that fits in one batch needs not even a generator.
    made: list[object] = []
    hooks = sys.get_asyncgen_hooks()
    sys.set_asyncgen_hooks(firstiter=made.append, finalizer=hooks.finalizer)
    try:
        calls = Calls()
        assert await settle_in_batches([0, 1, 2], calls.call) == []
        await run_in_batches([0], calls.call)
        await run_in_batches(calls.items(10), calls.call, size=4)
    finally:
        sys.set_asyncgen_hooks(*hooks)
    assert made == []
    assert sorted(calls.done) == [0, 0, 0, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9]


async def test_a_sequence_of_one_batch_is_taken_as_it_is_and_a_longer_one_in_batches() -> None:
    calls = Calls()
    assert await settle_in_batches(list(range(4)), calls.call, size=4) == []
    assert calls.most_running == 4
    calls = Calls()
    assert await settle_in_batches(list(range(9)), calls.call, size=4) == []
    assert calls.most_running == 4
    assert sorted(calls.done) == list(range(9))
    with pytest.raises(ValueError, match="batch size must be >= 1, got 0"):
        await run_in_batches([1], Calls().call, size=0)


async def test_each_batch_done_moves_the_message_in_hand() -> None:
    tracker = Progress().track("binder", stream="MUSTER", consumer="binder", max_ack_pending=8)
    tracker.began(7)
    calls = Calls()
    with tracker.handling(7):
        await run_in_batches(calls.items(10), calls.call, size=4)
        assert tracker.oldest == (7, 3)
        await settle_in_batches([1, 2], calls.call, size=4)  # one batch: over at once
    assert tracker.oldest == (7, 3)
