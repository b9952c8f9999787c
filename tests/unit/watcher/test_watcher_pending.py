"""watcher: a gang outside Kueue applied pod by pod, one pod per watch batch, is told pending in
O(log N) growing sets and O(N) bytes (`pods.pending_news`), its last set once its pods are still
(`deferred`); a restart neither loses that last set nor repeats one. Before, each batch told a
new set listing every pod so far: 8 000 pods stored 2.2 GB of pods_pending."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator

import pytest
from watcher_pods import CLUSTER, MarksBucket, Stream, Watcher, changed, looks_counted, pod

from muster.cluster import ClusterChange
from muster.contracts.v1 import events_pb2
from muster.watcher.deferred import BYTES_PER_S, LONGEST_S, QUIET_S, DeferredPending, quiet_for
from muster.watcher.pods import Sent, pending_news
from muster.watcher.service import batches

pytestmark = pytest.mark.timeout(20)

GANG = "g"


def told(stream: Stream) -> list[events_pb2.PodsPending]:
    return [env.pods_pending for env in stream.stored if env.type == "workload.pods_pending"]


def ids(stream: Stream) -> list[str]:
    return [env.event_id for env in stream.stored]


async def apply(watcher: Watcher, pods: range) -> None:
    """Apply pods `pods` of the gang one by one, each alone in its watch batch."""
    for i in pods:
        await watcher.handle(changed(pod(i, of=GANG, node="")))


@pytest.mark.parametrize("pods", [100, 500])
async def test_a_gang_applied_pod_by_pod_is_told_in_doubling_sets_then_whole_once_still(
    pods: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked = looks_counted(monkeypatch)
    watcher = Watcher(Stream(), MarksBucket())

    await apply(watcher, range(pods))
    arriving = told(watcher.stream)
    await watcher.wait(quiet_for(pods) / 2)
    assert told(watcher.stream) == arriving  # not still long enough yet
    await watcher.wait(quiet_for(pods) / 2)

    sets = told(watcher.stream)
    assert [s.count for s in arriving] == [2**k for k in range(math.ceil(math.log2(pods)))]
    assert len(sets) == len(arriving) + 1
    assert [p.name for p in sets[-1].pods] == sorted(f"{GANG}-{i}" for i in range(pods))
    # Bytes and pods looked at: O(N) (main: n² / 2, 8.5 MB of events at 500 pods).
    assert sum(s.ByteSize() for s in sets) < 3 * sets[-1].ByteSize()
    assert sum(looked) < 3 * pods
    await watcher.wait(QUIET_S * 10)
    assert len(told(watcher.stream)) == len(sets)  # told: nothing more while nothing changes


async def test_a_set_that_keeps_changing_is_told_at_least_every_longest_s() -> None:
    """64 pods pending, one replaced by another every half second: never still, never news
    by its count; told every LONGEST_S all the same."""
    watcher = Watcher(Stream(), MarksBucket())
    step_s = QUIET_S / 2
    await apply(watcher, range(64))
    for i in range(int(2 * LONGEST_S / step_s) + 1):
        await watcher.wait(step_s)
        await apply(watcher, range(64 + i, 65 + i))
        await watcher.handle(changed(pod(i, of=GANG, node=""), deleted=True))
    windows = [[p.name for p in s.pods] for s in told(watcher.stream)[7:]]
    assert windows == [  # after 1, 2, ... 64: told at 30.5 s and 60.5 s
        [f"{GANG}-{i}" for i in sorted(range(60, 124), key=str)],
        [f"{GANG}-{i}" for i in sorted(range(120, 184), key=str)],
    ]


async def test_a_restart_mid_gang_repeats_nothing_and_tells_the_whole() -> None:
    stream, bucket = Stream(), MarksBucket()
    first = Watcher(stream, bucket)
    await apply(first, range(300))  # 256 told, 257 to 299 waiting to be still: lost in the stop

    restarted = Watcher(stream, bucket)
    await restarted.start([pod(i, of=GANG, node="") for i in range(300)])
    await apply(restarted, range(300, 500))
    await restarted.wait(quiet_for(500))

    assert len(set(ids(stream))) == len(ids(stream))
    assert [s.count for s in told(stream)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 500]


@pytest.mark.parametrize("max_event_bytes", [1 << 20, 2048], ids=["listed", "over the limit"])
async def test_a_restart_while_the_last_set_waits_tells_it_once(max_event_bytes: int) -> None:
    """Stopped before its gang's last set was told: the next watcher tells it, though no pod
    changes after its start; the one after that tells nothing. A set over the event limit is
    not listed whole, so its event cannot say it: its mark is written."""
    stream, bucket = Stream(), MarksBucket()
    listed = [pod(i, of=GANG, node="") for i in range(100)]
    await apply(Watcher(stream, bucket, max_event_bytes=max_event_bytes), range(100))
    assert told(stream)[-1].count == 64

    for _ in range(2):
        restarted = Watcher(stream, bucket, max_event_bytes=max_event_bytes)
        await restarted.start(listed)
        await restarted.wait(QUIET_S)

    assert [s.count for s in told(stream)][-2:] == [64, 100]
    assert len(set(ids(stream))) == len(ids(stream))
    whole = len(told(stream)[-1].pods) == 100
    assert list(bucket.values) == ([] if whole else [f"{CLUSTER}.wl.ns.{GANG}"])


async def test_pods_bound_shrink_the_set_told_by_halves_and_none_pending_tells_nothing() -> None:
    watcher = Watcher(Stream(), MarksBucket())
    await apply(watcher, range(64))
    for i in range(64):  # bound one by one, as a binder short of time would
        await watcher.handle(changed(pod(i, of=GANG, node="n")))
    await watcher.wait(QUIET_S)
    assert [s.count for s in told(watcher.stream)][7:] == [32, 16, 8, 4, 2, 1]


async def test_a_smaller_set_after_a_delete_is_told_once_still_unless_every_pod_went() -> None:
    watcher = Watcher(Stream(), MarksBucket())
    await apply(watcher, range(4))
    await watcher.handle(changed(pod(3, of=GANG, node=""), deleted=True))
    assert [s.count for s in told(watcher.stream)] == [1, 2, 4]
    await watcher.wait(QUIET_S)
    assert [s.count for s in told(watcher.stream)] == [1, 2, 4, 3]

    for i in range(3):
        await watcher.handle(changed(pod(i, of=GANG, node=""), deleted=True))
    await watcher.wait(QUIET_S)
    assert [s.count for s in told(watcher.stream)] == [1, 2, 4, 3]


@pytest.mark.parametrize(
    ("pending", "last_told", "news"),
    [
        (0, 0, False),
        (1, 0, True),  # none told yet
        (7, 4, False),
        (8, 4, True),  # doubled
        (3, 4, False),
        (2, 4, True),  # halved
    ],
)
def test_pending_news_is_a_count_doubled_or_halved_since_the_last_told(
    pending: int, last_told: int, news: bool
) -> None:
    assert pending_news(pending, Sent(pending_count=last_told)) is news


async def test_pods_trickling_in_just_slower_than_the_quiet_time_are_told_by_the_second() -> None:
    """2 000 pods, one every 1.1 s: with a fixed second of quiet each pod was told with every
    pod before it (136 MB here); the quiet time grows with the set, so the tells stay within
    BYTES_PER_S (a doubling's, at most the set's size, on top) and the last set is whole."""
    watcher = Watcher(Stream(), MarksBucket())
    pods, step_s = 2000, QUIET_S * 1.1
    for i in range(pods):
        await apply(watcher, range(i, i + 1))
        await watcher.wait(step_s)
    await watcher.wait(LONGEST_S)

    sets = told(watcher.stream)
    assert [p.name for p in sets[-1].pods] == sorted(f"{GANG}-{i}" for i in range(pods))
    doublings = 2 * sets[-1].ByteSize()
    assert sum(s.ByteSize() for s in sets) < BYTES_PER_S * (pods * step_s + LONGEST_S) + doublings
    assert len(sets) < pods / 5  # the first ~240 sets, small, told each second; then fewer


@pytest.mark.parametrize(("pending", "quiet_s"), [(0, QUIET_S), (100, QUIET_S), (2000, 8.30078125),
                                                  (100_000, LONGEST_S)])  # fmt: skip
def test_the_quiet_time_grows_with_the_set_within_its_bounds(pending: int, quiet_s: float) -> None:
    assert quiet_for(pending) == quiet_s


def test_a_deferred_workload_is_due_once_still_or_longest_s_after_its_first_change() -> None:
    deferred = DeferredPending(quiet_s=1.0, longest_s=3.0)
    deferred.defer("a", now_s=0.0)
    deferred.defer("b", now_s=0.5)
    assert deferred.wait_s(now_s=0.5) == 0.5
    deferred.defer("a", now_s=0.9)  # still changing: later, up to 3 s after its first
    assert deferred.take_due(now_s=1.5) == ["b"]
    for now_s in (1.8, 2.7):
        deferred.defer("a", now_s=now_s)
    assert deferred.take_due(now_s=2.9) == []
    assert deferred.take_due(now_s=3.0) == ["a"]
    assert (deferred.wait_s(now_s=3.0), len(deferred), "a" in deferred) == (None, 0, False)

    deferred.defer("c", now_s=4.0)
    deferred.drop("c")  # told meanwhile
    assert (deferred.take_due(now_s=10.0), deferred.wait_s(now_s=10.0)) == ([], None)


async def test_the_watch_loop_gets_an_empty_batch_when_nothing_arrives_in_time() -> None:
    more = asyncio.Event()

    async def watch() -> AsyncGenerator[ClusterChange, None]:
        yield changed(pod(0, of=GANG, node=""))
        await more.wait()
        yield changed(pod(1, of=GANG, node=""))

    got: list[list[str]] = []

    def idle_s() -> float | None:  # wait for the first change, then not at all, then again
        return 0.0 if len(got) == 1 else None

    async for batch in batches(watch(), max_size=8, idle_s=idle_s):
        got.append([c.key for c in batch])
        if not batch:
            more.set()
    assert got == [["pod.ns.g-0"], [], ["pod.ns.g-1"]]
