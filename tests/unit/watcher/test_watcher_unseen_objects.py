"""What a resumed watcher tells of the workload objects it submitted that a list no longer
shows (`delete_unlisted`, task jobdelete410): deleted, with the id the watched deletion has;
an object changed (a new generation) is no deletion, an object made again under its name is."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
from test_watcher_batch import Marks, Poison
from test_watcher_jobsets import jobset
from watcher_pods import Stream, changed

from muster.bus.poison import Quarantine
from muster.cluster import ClusterChange
from muster.watcher.handlers import WatcherContext
from muster.watcher.outbox import Outbox
from muster.watcher.resume import Listed, delete_unlisted
from muster.watcher.service import _handle_batch

pytestmark = pytest.mark.timeout(10)


def kueue_workload(name: str, *, uid: str = "", generation: int = 1) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid or f"uid-{name}",
            "generation": generation,
            "creationTimestamp": "2026-11-27T06:00:00Z",
        },
        "spec": {
            "queueName": "lq",
            "podSets": [{"name": "main", "count": 1, "template": template}],
        },
    }


def submitted(marks: Marks) -> dict[str, str]:
    return {w: sent.submitted for w, sent in marks.sent.items() if sent.submitted}


def told_gone(ctx: WatcherContext, marks: Marks, *listed: dict[str, Any]) -> int:
    """How many workloads submitted a list of `listed` objects tells deleted."""
    return delete_unlisted(ctx, Listed.of(listed, []), submitted=submitted(marks))


async def watched(ctx: WatcherContext, *changes: ClusterChange) -> None:
    await _handle_batch(list(changes), ctx, cast(Quarantine, Poison()), groups=None, events=None)
    await ctx.outbox.flush()


def deletions(stream: Stream) -> dict[str, str]:
    return {e.workload: e.event_id for e in stream.stored if e.type == "workload.deleted"}


async def test_only_the_lives_a_list_no_longer_shows_are_told_deleted_with_the_watched_id() -> None:
    a, b, c = (kueue_workload(n) for n in "abc")
    stream, marks = Stream(), Marks()
    ctx = WatcherContext(cluster="local", outbox=Outbox(stream), marks=marks)
    await watched(ctx, changed(a), changed(b), changed(c))

    b_changed = kueue_workload("b", generation=2)  # the same object, its spec changed
    c_again = kueue_workload("c", uid="uid-c-2")  # deleted and made again under its name
    assert told_gone(ctx, marks, b_changed, c_again) == 2
    await ctx.outbox.flush()
    told = deletions(stream)
    assert sorted(told) == ["ns/a", "ns/c"]

    # What the watch would have published, had it shown the deletions: the same ids.
    shown = Stream()
    ctx_shown = WatcherContext(cluster="local", outbox=Outbox(shown), marks=Marks())
    await watched(ctx_shown, changed(a), changed(c))
    await watched(ctx_shown, changed(a, deleted=True), changed(c, deleted=True))
    assert deletions(shown) == told

    # Told once: a second list finds nothing more (the new c is the watch's to submit).
    assert told_gone(ctx, marks, b_changed, c_again) == 0


async def test_a_listed_object_that_does_not_decode_leaves_its_namespace_alone() -> None:
    stream, marks = Stream(), Marks()
    ctx = WatcherContext(cluster="local", outbox=Outbox(stream), marks=marks)
    await watched(ctx, changed(kueue_workload("a")))
    broken = copy.deepcopy(kueue_workload("x"))
    broken["spec"]["podSets"] = "not a list"

    assert told_gone(ctx, marks, broken) == 0
    assert told_gone(ctx, marks) == 1  # fixed or gone: told
    await ctx.outbox.flush()
    assert list(deletions(stream)) == ["ns/a"]


async def test_a_jobset_a_listing_watch_shows_is_not_told_deleted() -> None:
    """A watch that lists (a first start, a 410 Gone) shows each object as a change; a JobSet
    shown so is listed, as a Job is, and not taken for one deleted at the list's end."""
    stream, marks = Stream(), Marks()
    ctx = WatcherContext(cluster="local", outbox=Outbox(stream), marks=marks)
    train = jobset(version=1)
    await watched(ctx, changed(train))
    listing = Listed()
    listing.show(changed(train))

    assert delete_unlisted(ctx, listing, submitted=submitted(marks)) == 0
