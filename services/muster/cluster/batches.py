"""Cluster calls for many objects, made a batch at a time.

A workload may have 100 000 pods (api/validate.py). Making a task of each call at once holds
every call and its object together, and runs the first step of all of them in one turn of the
event loop: liveness answers and other workloads' events wait behind it (seconds, under load).
Batches bound both: the items are taken from the iterable (a generator: each made when its
batch starts) `size` at a time, a batch's calls run side by side, and the loop runs everything
else that is ready before the next batch starts.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from muster.bus.progress import advanced

T = TypeVar("T")

BATCH_SIZE = 256  # calls side by side: enough to keep the API server busy, few per loop turn


def batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """`items` in lists of `size` (the last may be shorter), each taken when it is asked for."""
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch


async def settle_in_batches(
    items: Iterable[T], call: Callable[[T], Awaitable[object]], *, size: int = BATCH_SIZE
) -> list[tuple[T, Exception]]:
    """`call(item)` for every item, `size` at a time; the items whose call raised, with what
    it raised, in order. Every call is made, whatever the others did."""
    return await _in_turns(items, call, size, settle=True)


async def run_in_batches(
    items: Iterable[T], call: Callable[[T], Awaitable[object]], *, size: int = BATCH_SIZE
) -> None:
    """`call(item)` for every item, `size` at a time; the first failure is raised once its
    batch has ended, and the batches after it are not started (the caller retries the whole:
    each call must be idempotent)."""
    if failed := await _in_turns(items, call, size, settle=False):
        raise failed[0][1]


async def _in_turns(
    items: Iterable[T], call: Callable[[T], Awaitable[object]], size: int, *, settle: bool
) -> list[tuple[T, Exception]]:
    """The batches of `items` one after the other, the failed calls (without `settle`, those
    of the first batch that had any); before each batch but the first, what else is ready
    runs, even if no call waited. A workload of one batch (most) pays no extra turn of the
    loop, nor, when `items` is a sequence, a generator and a copy. A plain loop: the event
    loop registers and finalizes every async generator made, paid per workload. Each batch
    done moves the message the caller's consume loop holds (`progress.advanced`)."""
    if isinstance(items, Sequence) and 0 < len(items) <= size:
        return await _settled(items, call)
    failed: list[tuple[T, Exception]] = []
    for i, batch in enumerate(batches(items, size)):
        if i:
            await asyncio.sleep(0)
        failed += await _settled(batch, call)
        if failed and not settle:
            break
        advanced()  # a large Job's pods take seconds under load: moving, not stalled
    return failed


async def _settled(
    batch: Sequence[T], call: Callable[[T], Awaitable[object]]
) -> list[tuple[T, Exception]]:
    """Run one batch's calls side by side (one alone in place: a gather makes a task of
    each); the failed ones."""
    if len(batch) == 1:
        try:
            await call(batch[0])
        except Exception as err:
            return [(batch[0], err)]
        return []
    results = await asyncio.gather(*(call(item) for item in batch), return_exceptions=True)
    failed = []
    for item, result in zip(batch, results, strict=True):
        if isinstance(result, Exception):
            failed.append((item, result))
        elif isinstance(result, BaseException):
            raise result  # cancelled, or exiting: not a call's failure
    return failed
