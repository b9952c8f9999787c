"""What keeps the binder from acting on the past: per workload, the fence no older admission may
start behind, the evictions already carried out, and one order for start, bind and stop.

Fed from the stream by every binder replica (`apply`: this cluster's `evicted` and
`eviction_completed`, every cluster's `finished` and `deleted`) and by the binder's own
evictions (`fence`, `completed`), which raise the fence before any pod is listed.

- An `admitted` or `gang_permitted` stored before the workload's latest eviction here, finish
  or deletion is stale: a redelivery after a crash, or a command of an earlier round. The
  fence of a finished or deleted workload is kept as a tombstone for `kept_s` of the stream's
  time (`--ended-kept-seconds`, as the ended submissions are: `core.submissions`); an
  admission older than every tombstone forgotten, of a workload whose spec is unknown too, is
  taken as stale.
- An eviction completed here (its `eviction_completed` seen, or published by this process) is
  not carried out again: a command redelivered or re-sent later is acknowledged and dropped.
- `WorkloadLocks` serialise the start, binds and stop of one workload in this process, so an
  eviction never lists the pods while a start of the admission it ends is half written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from muster.contracts.v1 import events_pb2
from muster.core.submissions import ENDED_KEPT_S, forget_older


class Fences:
    """Fences and completed evictions of one cluster's workloads. Pure."""

    def __init__(self, *, cluster: str, kept_s: float = ENDED_KEPT_S) -> None:
        self.cluster = cluster
        self.kept_s = kept_s
        self._fence: dict[str, int] = {}  # workload -> the sequence older admissions are behind
        self._done: dict[str, int] = {}  # workload -> the latest eviction sequence carried out
        self._ended: dict[str, float] = {}  # finished or deleted: tombstones, when, oldest first
        self._now_s = 0.0  # the latest end's time (an end without one takes it)
        self.forgotten_below = 0  # the highest fence of a tombstone dropped

    def __len__(self) -> int:
        return len(self._fence)

    def apply(self, env: events_pb2.Envelope) -> None:
        """Fold in one followed event (call in stream order)."""
        key = env.workload
        match env.WhichOneof("payload"):
            case "evicted" if env.cluster == self.cluster:
                self.fence(key, env.sequence)
            case "eviction_completed" if env.cluster == self.cluster:
                self.completed(key, env.eviction_completed.eviction_sequence)
            case "finished" | "deleted":
                self.fence(key, env.sequence)
                self._done.pop(key, None)
                self._ended.pop(key, None)
                self._now_s = max(self._now_s, env.time_unix_nano / 1e9)
                self._ended[key] = self._now_s
                self._forget_oldest()

    def fence(self, key: str, sequence: int) -> None:
        """No admission of `key` stored before `sequence` may start from now on."""
        if sequence > self._fence.get(key, 0):
            self._fence[key] = sequence

    def fence_of(self, key: str) -> int:
        return self._fence.get(key, 0)

    def stale(self, key: str, sequence: int, *, known: bool = True) -> bool:
        """Whether an admission or permit of `key` stored at `sequence` is behind its fence.

        `known`: whether the caller knows the workload otherwise (its spec): one it does not
        know, older than the tombstones forgotten, is taken as one of theirs.
        """
        if not sequence:
            return False  # not read from the stream (a test, a tool): no order to judge by
        fence = self._fence.get(key)
        if fence is None:
            return not known and sequence < self.forgotten_below
        return sequence < fence

    def completed(self, key: str, eviction_sequence: int) -> None:
        """The eviction stored at `eviction_sequence` was carried out here."""
        if eviction_sequence > self._done.get(key, 0):
            self._done[key] = eviction_sequence
        self.fence(key, eviction_sequence)

    def done(self, key: str, eviction_sequence: int) -> bool:
        """Whether the eviction stored at `eviction_sequence` was carried out already."""
        return 0 < eviction_sequence <= self._done.get(key, 0)

    def _forget_oldest(self) -> None:
        """Drop the tombstones older than `kept_s`."""
        for old in forget_older(self._ended, before_s=self._now_s - self.kept_s):
            self.forgotten_below = max(self.forgotten_below, self._fence.pop(old, 0))
            self._done.pop(old, None)


class WorkloadLocks:
    """One lock per workload key, made when first needed and dropped when nobody holds it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # key -> (lock, users)

    def __len__(self) -> int:
        return len(self._locks)

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
