"""The watcher's batches: what one batch of cluster changes publishes (`Outbox`), how changes are
drawn from the watch in batches (`batches`), and how a batch is remembered (`KvMarks`,
`RevisionSaver`). No NATS: a publisher and a bucket that record."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable, Sequence
from typing import cast

import msgspec
import pytest

from muster.bus import new_event
from muster.bus.errors import BusError, Reject, Retry
from muster.bus.kv import Bucket
from muster.cluster import ClusterChange
from muster.contracts.v1 import events_pb2
from muster.watcher.marks import KvMarks
from muster.watcher.outbox import Outbox
from muster.watcher.pods import Sent
from muster.watcher.service import RevisionSaver, batches

pytestmark = pytest.mark.timeout(10)


class Recorder:
    """Stores what `publish_many` is given as the bus does: a workload's events in order, none
    after one of its own that failed (`failures`: event id → what its next tries return)."""

    def __init__(self, failures: dict[str, list[BusError]] | None = None) -> None:
        self.stored: list[tuple[str, str]] = []  # (workload, type)
        self.failures = failures or {}
        self.calls = 0

    async def publish_many(self, envs: Sequence[events_pb2.Envelope]) -> list[int | BusError]:
        self.calls += 1
        await asyncio.sleep(0)
        results: list[int | BusError] = []
        stopped: set[str] = set()
        for env in envs:
            left = self.failures.get(env.event_id)
            if env.workload in stopped:
                results.append(Retry(0.0, "not sent"))
            elif left:
                results.append(left.pop(0))
                stopped.add(env.workload)
            else:
                self.stored.append((env.workload, env.type))
                results.append(len(self.stored))
        return results


def event(field: str, workload: str = "") -> events_pb2.Envelope:
    payloads = {
        "running": events_pb2.WorkloadRunning(),
        "pods_ready": events_pb2.PodsReady(),
        "config_applied": events_pb2.ConfigApplied(kind="LocalQueue", name="q"),
    }
    return new_event(field, payloads[field], cluster="local", workload=workload, source="test")


def filled(publisher: Recorder, envs: Iterable[events_pb2.Envelope]) -> Outbox:
    outbox = Outbox(publisher)
    for env in envs:
        outbox.add(env)
    return outbox


async def test_keeps_each_workloads_events_in_order_and_config_events_between() -> None:
    publisher = Recorder()
    envs = [
        event("running", "ns/a"),
        event("running", "ns/b"),
        event("pods_ready", "ns/a"),
        event("config_applied"),
        event("pods_ready", "ns/b"),
    ]
    outbox = filled(publisher, envs)
    assert len(outbox) == 5

    await outbox.flush()

    stored = publisher.stored
    assert len(outbox) == 0
    assert sorted(stored) == sorted((e.workload, e.type) for e in envs)
    a_first = stored.index(("ns/a", "workload.running"))
    assert a_first < stored.index(("ns/a", "workload.pods_ready"))
    config = stored.index(("", "config.applied"))
    assert stored.index(("ns/b", "workload.running")) < config
    assert stored.index(("ns/b", "workload.pods_ready")) > config
    assert publisher.calls == 3  # one batch of publishes per side of the config event


async def test_retries_a_temporary_failure_with_the_same_event_before_the_next() -> None:
    running, ready = event("running", "ns/a"), event("pods_ready", "ns/a")
    publisher = Recorder({running.event_id: [Retry(0.0, "no PubAck")]})

    await filled(publisher, [running, ready]).flush()

    assert publisher.stored == [("ns/a", "workload.running"), ("ns/a", "workload.pods_ready")]


async def test_retries_only_what_failed_and_what_came_after_it_in_its_workload() -> None:
    a0, a1, b0 = event("running", "ns/a"), event("pods_ready", "ns/a"), event("running", "ns/b")
    publisher = Recorder({a0.event_id: [Retry(0.0, "no PubAck")]})

    await filled(publisher, [a0, b0, a1]).flush()

    assert publisher.stored == [
        ("ns/b", "workload.running"),
        ("ns/a", "workload.running"),
        ("ns/a", "workload.pods_ready"),
    ]
    assert publisher.calls == 2


async def test_drops_an_event_refused_for_good_and_publishes_the_rest() -> None:
    running, ready = event("running", "ns/a"), event("pods_ready", "ns/a")
    publisher = Recorder({running.event_id: [Reject("oversized")]})

    await filled(publisher, [running, ready]).flush()

    assert publisher.stored == [("ns/a", "workload.pods_ready")]


def change(revision: int) -> ClusterChange:
    key = f"pod.ns.p{revision}"
    return ClusterChange(kind="Pod", type="ADDED", key=key, obj={}, revision=revision)


async def test_batches_hold_what_arrived_in_order_and_end_with_the_watch() -> None:
    arrived = asyncio.Event()

    async def watch() -> AsyncGenerator[ClusterChange, None]:
        for revision in (1, 2, 3):
            yield change(revision)
        await arrived.wait()  # the first batch is taken meanwhile
        for revision in (4, 5):
            yield change(revision)

    got: list[list[int]] = []
    async for batch in batches(watch(), max_size=2):
        got.append([c.revision for c in batch])
        arrived.set()

    assert got == [[1, 2], [3], [4, 5]]


async def test_batches_raise_what_ended_the_watch_after_the_changes_before_it() -> None:
    async def watch() -> AsyncGenerator[ClusterChange, None]:
        yield change(1)
        raise RuntimeError("watch lost")

    got: list[int] = []

    async def read_all() -> None:
        async for batch in batches(watch(), max_size=10):
            got.extend(c.revision for c in batch)

    with pytest.raises(RuntimeError, match="watch lost"):
        await read_all()
    assert got == [1]


class FakeBucket:
    """The part of a KV bucket the watcher writes: puts and deletes, recorded."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, bytes]] = []
        self.deletes: list[str] = []

    async def put(self, key: str, value: bytes) -> int:
        self.puts.append((key, value))
        return len(self.puts)

    async def delete(self, key: str) -> bool:
        self.deletes.append(key)
        return True


async def test_marks_are_written_once_per_flush_and_forgotten_when_empty() -> None:
    bucket = FakeBucket()
    marks = KvMarks(cast(Bucket, bucket), cluster="east")
    sent = marks.load("ns/a")
    sent.running.append("uid-1")
    marks.save("ns/a", sent)
    sent.pods_ready.append("uid-1")
    marks.save("ns/a", sent)  # changed twice in one batch: one write
    marks.save("ns/never", marks.load("ns/never"))  # nothing to remember, nor ever written
    assert bucket.puts == []  # nothing is written before the batch is over

    await marks.flush()

    assert bucket.puts == [("east.wl.ns.a", msgspec.json.encode(sent))]
    assert bucket.deletes == []  # a mark never written costs no deletion
    await marks.flush()
    assert len(bucket.puts) == 1  # nothing changed since

    marks.save("ns/a", Sent())  # its pods are gone: the written mark goes
    await marks.flush()
    assert bucket.deletes == ["east.wl.ns.a"]


async def test_marks_are_written_together_and_a_failed_write_is_tried_again() -> None:
    bucket = FakeBucket()
    calls: list[list[str]] = []

    async def put_many(items: Sequence[tuple[str, bytes]]) -> list[int | BusError]:
        calls.append([key for key, _ in items])
        if len(calls) == 1:  # the first write of ns/b gets no PubAck; ns/c's is too large
            return [1, Retry(0.0, "no PubAck"), Reject("too large")]
        return [2]

    marks = KvMarks(cast(Bucket, bucket), cluster="east", put_many=put_many)
    for workload in ("ns/a", "ns/b", "ns/c"):
        sent = marks.load(workload)
        sent.running.append(f"uid-{workload}")
        marks.save(workload, sent)

    await marks.flush()

    assert calls == [["east.wl.ns.a", "east.wl.ns.b", "east.wl.ns.c"], ["east.wl.ns.b"]]
    assert bucket.puts == []  # all went through put_many


async def test_revision_saver_stores_the_last_revision_handed_over_before_it_stops() -> None:
    bucket = FakeBucket()
    saver = RevisionSaver(bucket.put, "east", 3, interval_s=3600.0)
    saving = asyncio.create_task(saver.run())
    saver.handled(5)
    saver.handled(7)
    saver.stop()
    await saving
    assert bucket.puts[-1] == ("east", b"7")
