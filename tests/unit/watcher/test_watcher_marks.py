"""watcher.marks: a watcher restarted at any point of a workload's life publishes each fact
once, rebuilding what it sent from its own pod events (`KvMarks.recall`) and the few marks
it writes; which marks are written, and when. No NATS: a stream and a bucket that record,
and neither drops a duplicate (as after JetStream's 2-minute window)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from watcher_pods import CLUSTER, MarksBucket, Stream, Watcher, changed, pod

from muster.watcher.handlers import on_pod
from muster.watcher.pods import Sent, due_events, pod_state
from muster.watcher.resume import know_listed

pytestmark = pytest.mark.timeout(10)

WL = "ns/w"


# Each a workload's life, change by change: the pods as they are after it.
LIVES = {
    "pending, bound, running, succeeded, gone": [
        [pod(1, node=""), pod(2, node="")],
        [pod(1), pod(2, node="")],
        [pod(1), pod(2)],
        [pod(1, "Running"), pod(2)],
        [pod(1, "Running"), pod(2, "Running")],
        [pod(1, "Succeeded"), pod(2, "Running")],
        [pod(1, "Succeeded"), pod(2, "Succeeded")],
        [pod(2, "Succeeded")],
        [],
    ],
    "ready late, lost, regained, lost, gone, again": [
        [pod(1, "Running", ready=False)],
        [pod(1, "Running")],
        [pod(1, "Running", ready=False)],
        [pod(1, "Running")],
        [pod(1, "Running", ready=False)],
        [],
        [pod(3, "Running")],
        [pod(3, "Running", ready=False)],
    ],
    # A deletion that makes a fact due: the rest finished, or the rest ready.
    "one succeeded, the other deleted": [
        [pod(1, "Running"), pod(2, "Running")],
        [pod(1, "Succeeded"), pod(2, "Running")],
        [pod(1, "Succeeded")],
        [],
    ],
    "one ready late, the other deleted": [
        [pod(1, "Running"), pod(2, "Running", ready=False)],
        [pod(1, "Running")],
        [pod(1, "Succeeded")],
    ],
}


async def live(watcher: Watcher, history: list[list[Any]], *, since: Sequence[Any] = ()) -> None:
    """Change the pods from `since` to each state of `history` in turn, as the watch shows it."""
    before = {p["metadata"]["name"]: p for p in since}
    for pods in history:
        now = {p["metadata"]["name"]: p for p in pods}
        for name, obj in before.items():
            if name not in now:
                await watcher.handle(changed(obj, deleted=True))
        for name, obj in now.items():
            if before.get(name) != obj:
                await watcher.handle(changed(obj))
        before = now


def ids(stream: Stream) -> list[str]:
    return [env.event_id for env in stream.stored]


@pytest.mark.parametrize("history", LIVES.values(), ids=LIVES.keys())
async def test_a_watcher_restarted_at_any_point_publishes_each_fact_once(
    history: list[list[Any]],
) -> None:
    whole = Stream()
    await live(Watcher(whole, MarksBucket()), history)
    assert len(set(ids(whole))) == len(ids(whole))

    for cut in range(1, len(history)):
        stream, bucket = Stream(), MarksBucket()
        await live(Watcher(stream, bucket), history[:cut])
        restarted = Watcher(stream, bucket)
        await restarted.start(history[cut - 1])
        await live(restarted, history[cut:], since=history[cut - 1])
        assert ids(stream) == ids(whole), f"restarted after change {cut}"


@pytest.mark.parametrize("history", LIVES.values(), ids=LIVES.keys())
async def test_a_pod_deleted_while_the_watcher_was_stopped_and_never_shown_counts_as_deleted(
    history: list[list[Any]],
) -> None:
    """The watcher stopped, the next change made unwatched, and its deletions never shown to
    the resumed watch (a 410 after compaction, pruned tombstones): the list at start says
    which pods are gone, and each fact is still published once, as when it was watched."""
    whole = Stream()
    await live(Watcher(whole, MarksBucket()), history)
    for cut in range(1, len(history)):
        stream, bucket = Stream(), MarksBucket()
        await live(Watcher(stream, bucket), history[:cut])
        restarted = Watcher(stream, bucket)
        await restarted.start(history[cut])
        # The resumed watch shows what changed in the gap, but no deletion.
        left = {p["metadata"]["name"] for p in history[cut]}
        kept = [p for p in history[cut - 1] if p["metadata"]["name"] in left]
        await live(restarted, [history[cut]], since=kept)
        await live(restarted, history[cut + 1 :], since=history[cut])
        assert ids(stream) == ids(whole), f"pods of change {cut} deleted unwatched"


async def test_a_watcher_killed_after_telling_what_a_deletion_unseen_made_due_tells_it_once() -> (
    None
):
    stream, bucket = Stream(), MarksBucket()
    life = [[pod(1, "Running"), pod(2, "Running")], [pod(1, "Succeeded"), pod(2, "Running")]]
    await live(Watcher(stream, bucket), life)
    assert [env.WhichOneof("payload") for env in stream.stored] == ["running"]
    # Pod 2 deleted unseen; the next start tells `finished`, and is killed before its marks.
    killed = Watcher(stream, bucket)
    await killed.marks.read_all()
    await killed.marks.recall(stream.replay(), source=killed.ctx.source, live={WL: {"uid-w-1"}})
    listed = [s for s in [pod_state(pod(1, "Succeeded"))] if s is not None]
    know_listed(killed.ctx, listed, gone=[])
    await killed.ctx.outbox.flush()
    told = ids(stream)
    assert [env.WhichOneof("payload") for env in stream.stored] == ["running", "finished"]

    await Watcher(stream, bucket).start([pod(1, "Succeeded")])
    assert ids(stream) == told


async def test_pods_that_start_and_finish_cost_no_mark() -> None:
    stream, bucket = Stream(), MarksBucket()
    await live(Watcher(stream, bucket), LIVES["pending, bound, running, succeeded, gone"])
    # Pending {1}, {1, 2} as the watch shows them one by one, then {2}; running; finished.
    assert [env.WhichOneof("payload") for env in stream.stored] == [
        *["pods_pending"] * 3,
        "running",
        "finished",
    ]
    assert (bucket.puts, bucket.deletes) == ([], [])


async def test_a_loss_is_written_and_its_mark_forgotten_with_its_pods() -> None:
    stream, bucket = Stream(), MarksBucket()
    watcher = Watcher(stream, bucket)
    await live(watcher, [[pod(1, "Running")], [pod(1, "Running", ready=False)]])
    assert bucket.puts == [f"{CLUSTER}.wl.ns.w"]  # the count of losses: no event says it
    await live(watcher, [[]], since=[pod(1, "Running", ready=False)])
    assert (bucket.values, bucket.deletes) == ({}, [f"{CLUSTER}.wl.ns.w"])


async def test_marks_of_a_long_life_are_written_once_before_the_stream_can_drop_its_events() -> (
    None
):
    stream, bucket = Stream(), MarksBucket()
    watcher = Watcher(stream, bucket, clock_s=1000.0)
    await live(watcher, [[pod(1, "Running")]])
    watcher.now_s += 599.0
    await watcher.marks.flush()
    assert bucket.puts == []  # younger than seal_after_s (600 s): the stream says it all
    watcher.now_s += 1.0
    await watcher.marks.flush()
    watcher.now_s += 600.0
    await watcher.marks.flush()
    assert bucket.puts == [f"{CLUSTER}.wl.ns.w"]

    # Restarted with its events still in the stream: they add nothing to write again.
    again = Watcher(stream, bucket, clock_s=watcher.now_s + 600.0)
    await again.start([pod(1, "Running")])
    await again.marks.flush()
    assert bucket.puts == [f"{CLUSTER}.wl.ns.w"]

    # Restarted with none of its events left in the stream: the written mark says it all.
    restarted = Watcher(Stream(), bucket)
    await restarted.start([pod(1, "Running")])
    await live(restarted, [[pod(1, "Succeeded")]], since=[pod(1, "Running")])
    assert [env.WhichOneof("payload") for env in restarted.stream.stored] == ["finished"]


async def test_a_graceful_stop_writes_what_a_watcher_of_before_reads_but_a_cut_batchs() -> None:
    stream, bucket = Stream(), MarksBucket()
    watcher = Watcher(stream, bucket)
    await live(watcher, [[pod(1, "Running"), pod(1, "Running", of="v")]])
    await on_pod(changed(pod(1, "Succeeded", of="v")), watcher.ctx)  # stopped before stored

    await watcher.marks.seal()

    assert list(bucket.values) == [f"{CLUSTER}.wl.ns.w"]  # ns/v's marks may say too much
    sent = msgspec.json.decode(bucket.values[f"{CLUSTER}.wl.ns.w"], type=Sent)
    running = pod_state(pod(1, "Running"))
    assert running is not None
    assert due_events(WL, [running], sent) == []  # all a watcher of before reads: nothing due
