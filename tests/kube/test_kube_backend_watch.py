"""KubeBackend.watch against the API-server stand-in, through the official asyncio client:
list-then-watch, cut streams, 410 Gone, 429/500 answers, resuming, missing CRDs."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kube_backend_helpers import (
    ChangeLog,
    backend_for,
    job,
    node,
    pod,
    relabel,
)
from kube_helpers import cluster_queue

from muster.cluster.errors import ExpiredError
from muster.cluster.kube import Backoff, KubeBackend, WatchSettings, floor_of
from muster.cluster.kube.changes import ChangeCache, Pending, matches
from muster.cluster.kube.resources import watched_sources
from muster.devtools.apiserver import (
    ApiServer,
    builtin_resources,
    kueue_resources,
    podgroup_resources,
)

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    async with ApiServer(bookmark_interval_s=0.05) as running:
        yield running


@pytest.fixture
async def backend(server: ApiServer) -> AsyncIterator[KubeBackend]:
    async with backend_for(server) as made:
        yield made


async def test_lists_every_watched_object_then_streams_its_changes(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(node("n1"))
    await backend.apply(cluster_queue("cq"))
    await backend.apply(job("queued"))
    await backend.apply(job("plain", queue=None))
    await backend.apply(pod("mine", workload="w"))  # in both pod selections
    await backend.apply(pod("theirs", scheduler="default-scheduler"))
    async with ChangeLog(backend) as log:
        await log.wait_key("pod.default.mine", "ADDED")
        await log.barrier(server, backend)
        listed = {c.key for c in log.changes if c.type == "ADDED"}
        assert {
            "node.n1",
            "obj.ClusterQueue._.cq",
            "obj.Job.default.queued",
            "pod.default.mine",
            "obj.Namespace._.default",
            "obj.PriorityClass._.system-node-critical",
        } <= listed
        assert "obj.Job.default.plain" not in listed
        assert "pod.default.theirs" not in listed
        start = len(log.changes)
        await backend.bind("default", "mine", "n1")
        bound = await log.wait_key("pod.default.mine", "MODIFIED", start=start)
        assert bound.obj["spec"]["nodeName"] == "n1"
        assert bound.kind == "Pod"
        await backend.delete("Pod", "mine", namespace="default")
        gone = await log.wait_key("pod.default.mine", "DELETED", start=start)
        assert gone.obj["spec"]["nodeName"] == "n1"  # the last state
        await log.barrier(server, backend)
    assert [t for t, _ in log.about("pod.default.mine")] == ["ADDED", "MODIFIED", "DELETED"]
    revisions = [c.revision for c in log.changes]
    assert revisions == sorted(set(revisions))
    listed_job = next(c for c in log.changes if c.key == "obj.Job.default.queued")
    assert (listed_job.kind, listed_job.obj["apiVersion"]) == ("Job", "batch/v1")


def backend_state_rv(server: ApiServer, name: str) -> str:
    pods = server.registry.by_key(("", "pods"))
    assert pods is not None
    return str(server.api.get(pods, "default", name)["metadata"]["resourceVersion"])


async def _write_pod_states(server: ApiServer, backend: KubeBackend, name: str, count: int) -> None:
    await backend.apply(pod(name, workload="w"))
    for i in range(count):
        relabel(server, name, {"step": str(i)})


async def test_a_watch_cut_mid_stream_loses_and_repeats_nothing(
    server: ApiServer, backend: KubeBackend
) -> None:
    async with ChangeLog(backend) as log:
        await log.barrier(server, backend)
        # Both pod watches are cut inside their second event's line, again and again.
        server.faults.drop_next_watch(6, after_events=1, partial=True, path="/pods$")
        server.drop_watches()
        await _write_pod_states(server, backend, "p", 5)
        server.drop_watches()
        await backend.apply(pod("q", workload="w"))
        await log.wait_key("pod.default.q", "ADDED")
        await log.barrier(server, backend)
    states = log.about("pod.default.p")
    assert [t for t, _ in states] == ["ADDED"] + ["MODIFIED"] * 5
    assert len({rv for _, rv in states}) == 6
    # Each pod watch reopened after the first cut, and again after each cut mid-event.
    assert server.requests.count(verb="watch", path="/pods$") >= 6


async def test_410_gone_relists_and_shows_only_what_changed_in_the_gap(
    server: ApiServer, backend: KubeBackend
) -> None:
    for name in ("same", "changed", "removed"):
        await backend.apply(pod(name, workload="w"))
    async with ChangeLog(backend) as log:
        await log.barrier(server, backend)
        start = len(log.changes)
        server.faults.fail_next(1000, status=503, verb="watch")  # keep every watch away
        server.drop_watches()
        relabel(server, "changed", {"x": "1"})
        await backend.delete("Pod", "removed", namespace="default")
        await backend.apply(pod("new", workload="w"))
        server.compact()  # the gap is gone from history: resuming gets 410
        server.faults.clear()
        await log.wait_key("pod.default.new", "ADDED", start=start)
        await log.barrier(server, backend)
    after = [(c.type, c.key) for c in log.changes[start:] if c.key.startswith("pod.")]
    assert sorted(after) == [
        ("ADDED", "pod.default.new"),
        ("DELETED", "pod.default.removed"),
        ("MODIFIED", "pod.default.changed"),
    ]
    assert server.requests.count(verb="list", path="/pods$") >= 4  # two lists per pod source


async def test_429_and_500_answers_delay_the_watch_but_never_corrupt_it(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(pod("early", workload="w"))
    server.faults.fail_next(4, status=429, retry_after_s=0, verb="list")
    server.faults.fail_next(4, status=500, verb="watch")
    async with ChangeLog(backend) as log:
        await log.wait_key("pod.default.early", "ADDED")
        server.faults.fail_next(6, status=500, verb="watch")
        server.drop_watches()
        await _write_pod_states(server, backend, "later", 3)
        await log.barrier(server, backend)
    assert [t for t, _ in log.about("pod.default.early")] == ["ADDED"]
    # A source that lists after the changes shows only the last state; never an older one.
    later = log.about("pod.default.later")
    assert [t for t, _ in later] == ["ADDED"] + ["MODIFIED"] * (len(later) - 1)
    versions = [int(rv) for _, rv in later]
    assert versions == sorted(set(versions))
    assert versions[-1] == int(backend_state_rv(server, "later"))
    assert server.faults.pending() == 0


async def test_a_resumed_watch_starts_at_the_floor_of_the_last_revision(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(cluster_queue("old"))
    async with ChangeLog(backend) as first:
        await first.wait_key("obj.ClusterQueue._.old", "ADDED")
        await first.barrier(server, backend)
        last = first.changes[-1].revision
    await backend.apply(cluster_queue("new"))
    await backend.delete("ClusterQueue", "old")
    async with ChangeLog(backend, from_revision=last) as resumed:
        await resumed.wait_key("obj.ClusterQueue._.old", "DELETED")
        await resumed.wait_key("obj.ClusterQueue._.new", "ADDED")
        await resumed.barrier(server, backend)
    keys = {c.key for c in resumed.changes}
    assert "obj.Namespace._.default" not in keys  # nothing from before the floor is listed
    assert all(c.revision > last for c in resumed.changes)
    assert floor_of(last) > 0


async def test_a_watch_from_0_says_once_when_it_has_shown_its_list(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(pod("mine", workload="w"))
    await backend.apply(job("queued"))
    async with ChangeLog(backend) as log:
        await log.barrier(server, backend)  # every source listed
        await backend.apply(job("later"))
        await log.wait_key("obj.Job.default.later", "ADDED")
    (at,) = log.listed_at
    listed = {c.key for c in log.changes[:at]}
    assert {"pod.default.mine", "obj.Job.default.queued"} <= listed
    assert "obj.Job.default.later" not in listed


async def test_a_resume_from_inside_the_initial_list_expires_for_a_consumer_that_lists(
    backend: KubeBackend,
) -> None:
    # A revision under 1 << SEQ_BITS: the consumer stopped before every source had listed.
    # Its watch would list again, and could not show what the consumer lost meanwhile.
    with pytest.raises(ExpiredError, match="inside the initial list"):
        async for _ in backend.watch(from_revision=5, lists_again=True):
            pass


async def test_a_custom_resource_not_installed_is_skipped_then_picked_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with (
        ApiServer(
            resources=builtin_resources() + kueue_resources(), bookmark_interval_s=0.05
        ) as server,
        backend_for(server) as backend,
    ):
        await backend.apply(node("n1"))
        with caplog.at_level(logging.WARNING, logger="muster.cluster.kube.informer"):
            async with ChangeLog(backend) as log:
                await log.wait_key("node.n1", "ADDED")
                await log.barrier(server, backend)
                server.register(podgroup_resources()[0])
                await backend.apply(
                    {
                        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                        "kind": "PodGroup",
                        "metadata": {"name": "gang", "namespace": "default"},
                        "spec": {"minMember": 2},
                    }
                )
                shown = await log.wait_key("obj.PodGroup.default.gang", "ADDED")
                assert shown.obj["spec"] == {"minMember": 2}
    missing = [r for r in caplog.records if "podgroups" in r.getMessage()]
    assert len(missing) == 1
    assert "not served" in missing[0].getMessage()


def _pod_state(rv: int, *, labelled: bool = True, scheduler: str = "muster") -> dict[str, Any]:
    labels = {"muster.dev/workload": "w"} if labelled else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "default",
            "labels": labels,
            "resourceVersion": str(rv),
        },
        "spec": {"schedulerName": scheduler},
    }


def test_a_pod_in_both_selections_is_shown_once_per_state() -> None:
    sources = watched_sources(scheduler_name="muster", kueue_version="v1beta1")
    by_scheduler, by_label = (i for i, s in enumerate(sources) if s.resource.kind == "Pod")
    cache = ChangeCache(sources, floor=lambda: 0)

    def shown(pending: Pending | None) -> str | None:
        return None if pending is None else pending.type

    assert shown(cache.upsert(by_label, _pod_state(1))) == "ADDED"
    assert shown(cache.upsert(by_scheduler, _pod_state(1))) is None
    assert shown(cache.upsert(by_scheduler, _pod_state(2))) == "MODIFIED"
    assert shown(cache.upsert(by_label, _pod_state(2))) is None
    # The label goes: it leaves one selection only.
    assert shown(cache.remove(by_label, _pod_state(3, labelled=False))) is None
    assert shown(cache.upsert(by_scheduler, _pod_state(3, labelled=False))) == "MODIFIED"
    # Deleted for real: shown when its last selection reports it.
    assert shown(cache.upsert(by_label, _pod_state(4))) == "MODIFIED"
    assert shown(cache.remove(by_label, _pod_state(5))) is None
    assert shown(cache.remove(by_scheduler, _pod_state(5))) == "DELETED"
    assert shown(cache.upsert(by_label, _pod_state(4))) is None  # a stale replay
    # A resumed watch never showed it: every selection that may hold it must report it gone.
    fresh = ChangeCache(sources, floor=lambda: 0)
    assert shown(fresh.remove(by_scheduler, _pod_state(5))) is None
    assert shown(fresh.remove(by_label, _pod_state(5))) == "DELETED"
    assert shown(fresh.remove(by_scheduler, _pod_state(5))) is None
    # A relist of the only selection holding it shows it gone.
    relisted = ChangeCache(sources, floor=lambda: 0)
    assert shown(relisted.upsert(by_scheduler, _pod_state(6, labelled=False))) == "ADDED"
    assert [p.type for p in relisted.vanished(by_scheduler, set())] == ["DELETED"]


async def test_the_placement_watch_adds_every_bound_pod_and_leaves_queues_out(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(node("n1"))
    await backend.apply(pod("theirs", scheduler="default-scheduler"))
    await backend.apply(pod("mine"))
    await backend.apply(job("queued"))
    async with ChangeLog(backend, selection="placement") as log:
        await log.wait_key("pod.default.mine", "ADDED")
        await log.caught_up(server, backend)
        assert "pod.default.theirs" not in {c.key for c in log.changes}  # not bound yet
        await backend.bind("default", "theirs", "n1")  # as kube-scheduler does
        bound = await log.wait_key("pod.default.theirs", "ADDED")
        assert bound.obj["spec"]["nodeName"] == "n1"
        await backend.delete("Pod", "theirs", namespace="default")
        await log.wait_key("pod.default.theirs", "DELETED")
        await log.caught_up(server, backend)
    assert not [c for c in log.changes if c.key.startswith(("obj.Job.", "obj.ClusterQueue."))]
    assert server.requests.count(verb="list", path="/clusterqueues$") == 0
    assert server.requests.count(verb="list", path="/jobs$") == 0


async def test_progress_reaches_the_current_revision_without_a_change(
    server: ApiServer, backend: KubeBackend
) -> None:
    target = await backend.current_revision()
    async with ChangeLog(backend, selection="placement") as log:
        await log.wait_progress(target)  # the initial lists got there
        seen = len(log.changes)
        await backend.apply(job("elsewhere"))  # a write this selection does not show
        later = await backend.current_revision()
        assert later > target
        server.send_bookmarks()  # how a quiet source tells it has seen everything
        await log.wait_progress(later)
    assert len(log.changes) == seen
    revisions = [c.revision for c in log.changes]
    assert max(revisions) <= log.progress


def test_a_field_selector_that_negates_matches_as_the_server_does() -> None:
    bound = next(
        s for s in watched_sources(scheduler_name="muster", kueue_version="v1beta1",
                                   selection="placement")
        if s.field_selector == "spec.nodeName!="
    )  # fmt: skip
    assert matches(bound, {"spec": {"nodeName": "n1"}})
    assert not matches(bound, {"spec": {"nodeName": ""}})
    assert not matches(bound, {"spec": {}})


async def test_each_cut_of_a_watch_that_worked_waits_the_first_delay_only(
    server: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Cuts apart in time, each after events went through, are separate outages: the back-off
    # starts over (it climbed to its 10 s maximum over a long-lived watcher's occasional cuts).
    climbing = WatchSettings(backoff=Backoff(initial_s=0.1, max_s=3.2))
    caplog.set_level(logging.DEBUG, logger="muster.cluster.kube.informer")
    async with backend_for(server, watch=climbing) as backend, ChangeLog(backend) as log:
        await backend.apply(pod("p", workload="w"))
        for step in range(6):
            relabel(server, "p", {"step": str(step)})
            await log.barrier(server, backend)  # every source watches again, and delivered
            server.drop_watches()
        await log.barrier(server, backend)
    source = "pods.core[muster.dev/workload]: "
    waits = [
        r.getMessage().rsplit("; again in ", 1)[1]
        for r in caplog.records
        if r.getMessage().startswith(source) and "; again in " in r.getMessage()
    ]
    # A cut that lands between two chunks ends the response cleanly and is retried at once,
    # without a wait: so at most six, and every one the first delay.
    assert 3 <= len(waits) <= 6
    assert set(waits) == {"0.1s"}
