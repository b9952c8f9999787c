"""What the watcher sent per workload (`KvMarks`): held in memory, rebuilt at start from two
places. The watcher's own pod events in MUSTER_EVENTS say which pods each covered, so they
are read back (`recall`) instead of written twice; the `MUSTER_WATCHER` bucket keeps the rest
(what a workload object's events cannot say, the readiness counts) and, once a workload's
events are `seal_after_s` old, its marks too, long before the stream's limits drop them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Collection, Mapping, Sequence

import msgspec

from muster.bus.errors import BusError, Reject, Retry, Unavailable
from muster.bus.kv import Bucket
from muster.bus.progress import advanced
from muster.contracts.v1 import events_pb2
from muster.watcher.pods import Sent

log = logging.getLogger(__name__)

# A workload's marks that only its events tell are written once they are this old: MUSTER_EVENTS
# keeps 7 days (or 10 GiB) of events, so a long-lived workload's would leave it before a restart
# reads them back. Short-lived workloads, most of them, never cost a write.
SEAL_AFTER_S = 600.0
_READ_TIMEOUT_S = 30.0  # reading the marks at start

# KV puts of distinct keys, in flight together: per (key, value) its revision or why not.
PutMany = Callable[[Sequence[tuple[str, bytes]]], Awaitable[Sequence[int | BusError]]]


class KvMarks:
    """`MarksStore` of one cluster: every mark in memory (`read_all`, then `recall`, at start);
    those saved, and those noted `seal_after_s` ago, written by `flush` (through `put_many`,
    else one by one with `kv.put`)."""

    def __init__(
        self,
        kv: Bucket,
        *,
        cluster: str,
        put_many: PutMany | None = None,
        clock_s: Callable[[], float] = time.time,
        seal_after_s: float = SEAL_AFTER_S,
    ) -> None:
        self._kv = kv
        self._put_many = put_many or self._put_one_by_one
        self._prefix = f"{cluster}.wl."
        self._clock_s = clock_s
        self._seal_after_s = seal_after_s
        self._cache: dict[str, Sent] = {}
        self._changed: set[str] = set()
        self._stored: set[str] = set()  # workloads whose marks the bucket holds
        # Workload → when the first of its marks not yet written was published (Unix s).
        self._unsealed: dict[str, float] = {}
        self._next_sweep_s = 0.0
        self._touched: set[str] = set()  # noted or saved since the last flush

    def _key(self, workload: str) -> str:
        namespace, _, name = workload.partition("/")
        return f"{self._prefix}{namespace}.{name}"

    async def read_all(self) -> None:
        """Read every mark of the cluster the bucket holds."""
        found = await self._kv.snapshot(f"{self._prefix}>", timeout_s=_READ_TIMEOUT_S)
        for key, entry in found.items():
            namespace, _, name = key.removeprefix(self._prefix).partition(".")
            workload = f"{namespace}/{name}"
            self._cache[workload] = msgspec.json.decode(entry.value or b"{}", type=Sent)
            self._stored.add(workload)

    async def recall(
        self,
        envs: AsyncIterable[events_pb2.Envelope],
        *,
        source: str,
        live: Mapping[str, Collection[str]] | None,
    ) -> int:
        """Add to the marks what the watcher's own pod events say it published (`envs`: those
        read back from the stream, in order; `source`: the watcher's) about the workloads with
        pods listed now (`live`: workload → pod uids; None when the cluster could not be
        listed: then about every workload); the number of events read. Then, a workload with
        no mark sent nothing. Marks of pods not listed are kept: `gone` finds them, and
        deciding their workload forgets them, as a watched deletion does."""
        recalled: dict[str, Sent] = {}
        since: dict[str, float] = {}
        read = 0
        async for env in envs:
            read += 1
            if env.source != source or (live is not None and env.workload not in live):
                continue  # another's, or about pods gone: nothing to hold back
            recalled.setdefault(env.workload, Sent()).recall(env)
            since.setdefault(env.workload, env.time_unix_nano / 1e9)
        for workload, sent in recalled.items():
            if self.load(workload).absorb(sent):  # not all written already: to seal
                self._unsealed.setdefault(workload, since[workload])
        return read

    def gone(self, live: Mapping[str, Collection[str]]) -> list[str]:
        """The workloads whose marks name a pod not listed now (`live`: workload → pod uids):
        deleted while the watch did not show it (sorted)."""
        return sorted(
            w for w, sent in self._cache.items() if sent.names_pods_except(live.get(w, ()))
        )

    def submitted(self) -> dict[str, str]:
        """Workload → the life (`translate.incarnation`) its last `submitted` was about, of
        each one submitted and not deleted since."""
        return {w: sent.submitted for w, sent in self._cache.items() if sent.submitted}

    def load(self, workload: str) -> Sent:
        return self._cache.setdefault(workload, Sent())

    def save(self, workload: str, sent: Sent) -> None:
        self._cache[workload] = sent
        self._changed.add(workload)
        self._touched.add(workload)

    def note(self, workload: str, sent: Sent) -> None:
        self._cache[workload] = sent
        self._unsealed.setdefault(workload, self._clock_s())
        self._touched.add(workload)

    async def flush(self) -> None:
        """Write every mark saved since the last flush, and those noted `seal_after_s` ago (all
        in flight together), and forget the emptied ones, retrying until done. Called once the
        events that changed them are stored."""
        self._touched = set()
        self._sweep()
        changed, self._changed = self._changed, set()
        await self._write(changed)

    async def seal(self) -> None:
        """Write every mark noted but not written, but those of a batch cut short (its events
        may not be stored): on a graceful stop, so that a watcher of before, which reads only
        the bucket, can follow this one (docs/events.md, "The watcher's own record")."""
        changed = {w for w in (*self._unsealed, *self._changed) if w not in self._touched}
        self._changed = set()
        await self._write(changed)

    async def _write(self, changed: set[str]) -> None:
        puts: list[tuple[str, bytes]] = []
        for workload in sorted(changed):
            self._unsealed.pop(workload, None)
            sent = self._cache.get(workload, Sent())
            key = self._key(workload)
            if not sent.empty:
                puts.append((key, msgspec.json.encode(sent)))
                self._stored.add(workload)
                continue
            self._cache.pop(workload, None)
            if workload in self._stored:  # one never written costs no deletion either
                self._stored.discard(workload)
                forget = functools.partial(self._kv.delete, key)
                await until_done(f"forgetting marks of {workload}", forget)
        delay_s = 0.1
        while puts:
            results = await self._put_many(puts)
            left = [put for put, result in zip(puts, results, strict=True) if _again(put, result)]
            if left:
                log.warning("saving %d marks failed; retrying", len(left))
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 5.0)
            puts = left

    def _sweep(self) -> None:
        """Mark for writing the workloads noted `seal_after_s` ago (looked at a few times in
        that span, not at every batch)."""
        now_s = self._clock_s()
        if now_s < self._next_sweep_s:
            return
        self._next_sweep_s = now_s + self._seal_after_s / 10
        due = [w for w, since_s in self._unsealed.items() if now_s - since_s >= self._seal_after_s]
        self._changed.update(due)

    async def _put_one_by_one(self, items: Sequence[tuple[str, bytes]]) -> list[int | BusError]:
        results: list[int | BusError] = []
        for key, value in items:
            try:
                results.append(await self._kv.put(key, value))
            except BusError as exc:
                results.append(exc)
        return results


def _again(put: tuple[str, bytes], result: int | BusError) -> bool:
    """Whether the put of a mark must be tried again: any failure but one for good (logged:
    its workload's facts may then be published again after a restart)."""
    if isinstance(result, Reject):
        log.error("marks not saved: %s", result, extra={"key": put[0]})
        return False
    return isinstance(result, BusError)


async def until_done(what: str, write: Callable[[], Awaitable[object]]) -> None:
    """Run `write` until it succeeds, backing off on NATS failures (it must be idempotent)."""
    delay_s = 0.1
    while True:
        try:
            await write()
            return
        except (Retry, Unavailable, TimeoutError) as err:
            log.warning("%s failed: %r; retrying", what, err)
        advanced()  # a failed try is an answer: slow, not stalled (bus/progress.py)
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 5.0)
