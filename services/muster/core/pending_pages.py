"""A ClusterQueue's waiting records in admission order, held in pages under stable ids.

Visibility writes each page under a key of its own (`pending-page.<id>.<cq>`) and an index of
the pages in order with their counts per LocalQueue. A page keeps its id while records come
and go, and splits past `PAGE_MAX` records or merges with a neighbour below `PAGE_MIN`, so one
arrival or departure changes one page (two when it splits or merges) and the index: never
every page after it, as pages of fixed positions did. A reader finds a position from the
counts in the index, and a LocalQueue's pages from its counts per page.

Inserting into a page is also cheaper than into one list of a very long queue (a memmove
of the whole queue's tail).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Final

from muster.core.records import WorkloadRecord

if TYPE_CHECKING:
    from muster.core.queues import OrderKey

PAGE_MAX: Final = 128  # a page past this splits in halves
PAGE_MIN: Final = 32  # a page below this merges with a neighbour (then splits if past MAX)
_order = attrgetter("order_key")


class PendingPage:
    """Records in order, and how many of them each LocalQueue ("ns/name") holds."""

    __slots__ = ("id", "local_queues", "records")

    def __init__(self, page_id: int, records: list[WorkloadRecord]) -> None:
        self.id = page_id
        self.records = records
        self.local_queues: dict[str, int] = {}
        for r in records:
            self._count(r.local_queue, 1)

    def _count(self, local_queue: str, sign: int) -> None:
        n = self.local_queues.get(local_queue, 0) + sign
        if n:
            self.local_queues[local_queue] = n
        else:
            del self.local_queues[local_queue]


class PendingPages:
    """Waiting records in pages; `insert` and `remove` return the ids of the pages they
    changed, made or dropped. Iterates over the records in order."""

    __slots__ = ("_firsts", "_next_id", "page_max", "page_min", "pages", "size")

    def __init__(self, *, page_max: int = PAGE_MAX, page_min: int = PAGE_MIN) -> None:
        if not 1 <= page_min <= page_max // 2:
            raise ValueError(f"pages need 1 <= min ({page_min}) <= max/2 ({page_max})")
        self.page_max, self.page_min = page_max, page_min
        self.pages: list[PendingPage] = []
        self._firsts: list[OrderKey] = []  # each page's first order key
        self._next_id = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[WorkloadRecord]:
        return chain.from_iterable(p.records for p in self.pages)

    def insert(self, r: WorkloadRecord) -> list[int]:
        key = r.order_key
        self.size += 1
        if not self.pages:
            self._firsts.append(key)
            self.pages.append(self._new([r]))
            return [self.pages[0].id]
        i = max(0, bisect_right(self._firsts, key) - 1)
        page = self.pages[i]
        records = page.records
        if _order(records[-1]) < key:
            records.append(r)  # the usual arrival: last of its page
        else:
            at = bisect_left(records, key, key=_order)
            records.insert(at, r)  # order keys end with the arrival: never equal
            if at == 0:
                self._firsts[i] = key
        counts, local_queue = page.local_queues, r.local_queue
        counts[local_queue] = counts.get(local_queue, 0) + 1
        if len(records) > self.page_max:
            return self._split(i)
        return [page.id]

    def remove(self, r: WorkloadRecord, cluster_queue: str) -> list[int]:
        first = self.pages[0].records if self.pages else ()
        if first and first[0] is r:
            i = at = 0  # the usual departure: the head, admitted
        else:
            key = r.order_key
            i = bisect_right(self._firsts, key) - 1
            records = self.pages[i].records if i >= 0 else []
            at = bisect_left(records, key, key=_order)
            if at == len(records) or records[at] is not r:
                raise AssertionError(f"{r.key} is not waiting in ClusterQueue {cluster_queue!r}")
        page = self.pages[i]
        records = page.records
        del records[at]
        page._count(r.local_queue, -1)
        self.size -= 1
        if not records:
            del self.pages[i], self._firsts[i]
            return [page.id]
        if at == 0:
            self._firsts[i] = _order(records[0])
        if len(records) < self.page_min and len(self.pages) > 1:
            return self._merge(i if i + 1 < len(self.pages) else i - 1)
        return [page.id]

    def _new(self, records: list[WorkloadRecord]) -> PendingPage:
        page = PendingPage(self._next_id, records)
        self._next_id += 1
        return page

    def _split(self, i: int) -> list[int]:
        """Page `i` keeps its first half; a new page after it takes the second."""
        page = self.pages[i]
        half = len(page.records) // 2
        second = self._new(page.records[half:])
        del page.records[half:]
        for r in second.records:
            page._count(r.local_queue, -1)
        self.pages.insert(i + 1, second)
        self._firsts.insert(i + 1, _order(second.records[0]))
        return [page.id, second.id]

    def _merge(self, i: int) -> list[int]:
        """Page `i + 1` joins page `i` (split again when too long together)."""
        page, gone = self.pages[i], self.pages[i + 1]
        page.records += gone.records
        for local_queue, n in gone.local_queues.items():
            page._count(local_queue, n)
        del self.pages[i + 1], self._firsts[i + 1]
        if len(page.records) > self.page_max:
            return [gone.id, *self._split(i)]
        return [page.id, gone.id]
