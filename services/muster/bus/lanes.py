"""`Lane`: the queue between a consume loop's pull and one of its lane tasks (consumer.py).

`asyncio.Queue` does more than a lane needs (sizes, putters, `task_done` and its event), about
a dozen calls per message put and got; a lane has one reader and never fills.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Generic, TypeVar

T = TypeVar("T")


class Lane(Generic[T]):
    """A first-in, first-out queue without bound, read by one task at a time."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None  # its reader's, while it waits

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        """Queue `item`, waking the reader if it waits."""
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> T:
        """The oldest item, once there is one. RuntimeError when another task already waits."""
        while not self._items:
            if self._waiter is not None:
                raise RuntimeError("a lane has one reader")
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return self._items.popleft()
