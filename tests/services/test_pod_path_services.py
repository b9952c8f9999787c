"""watcher, gangpermit and binder against a real nats-server and the sim cluster with its kubelet.

Each test starts the services in-process on the test's bus (`placement_stack`), drives them with
the events admission would publish, and waits for the events they publish on their subjects.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from bus_helpers import EventLog, outlive_the_window, short_duplicate_window
from placement_stack import (
    CLUSTER,
    Stack,
    node,
    placement_stack,
    submit_and_admit,
    types_of,
    workload_manifest,
)

from muster.bus import EVENTS_STREAM, Bus
from muster.bus.buckets import WATCHER_BUCKET
from muster.cluster.backend import PodSetStart
from muster.contracts.v1 import events_pb2

pytestmark = pytest.mark.timeout(60)

WINDOW_S = 0.2  # MUSTER_EVENTS' duplicate window where a test shortens it (2 min in production)

FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "ResourceFlavor",
    "metadata": {"name": "default"},
}


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    """watcher, gangpermit (30 s gang timeout), binder and a fast kubelet on one cluster."""
    async with placement_stack(bus, events) as s:
        yield s


async def test_admitted_gang_of_three_is_started_permitted_bound_run_and_finished(
    stack: Stack,
) -> None:
    for name in ("a", "b"):
        await stack.backend.apply(node(name))
    key = await submit_and_admit(stack, "train", count=3)

    permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
    assert len(permitted.gang_permitted.bindings) == 3
    assert {b.node for b in permitted.gang_permitted.bindings} == {"a", "b"}
    bound = await stack.events.wait_for("bound", workload=key)
    assert bound.cause == permitted.event_id
    running = await stack.events.wait_for("running", workload=key)
    assert running.running.pods_ready  # every pod ready as it started: no pods_ready follows
    finished = await stack.events.wait_for("finished", workload=key)
    assert finished.finished.succeeded
    # gang_waiting as the pods appear one by one; no pods_pending: the binder made them.
    life = [t for t in types_of(stack.events, key) if t != "workload.gang_waiting"]
    assert life == [
        "workload.submitted",
        "workload.admitted",
        "workload.gang_permitted",
        "workload.bound",
        "workload.running",
        "workload.finished",
    ]
    placed = sorted(b.node for b in permitted.gang_permitted.bindings)
    await stack.wait_for_pods(key, lambda pods: sorted(p.node_name for p in pods) == placed)


async def test_admitted_gang_of_four_waits_whole_until_a_new_node_makes_room(stack: Stack) -> None:
    await stack.backend.apply(node("a", cpu="4"))
    await stack.backend.apply(node("b", cpu="2"))  # room for 3 pods of 2 cpu, not 4
    key = await submit_and_admit(stack, "big", count=4, run_seconds=None)

    waiting = await stack.events.wait_for("gang_waiting", workload=key, timeout_s=10)
    while waiting.gang_waiting.pending < 4:  # the binder may create the pods a few at a time
        waiting = await stack.events.wait_for_next("gang_waiting", after=waiting, timeout_s=10)
    assert waiting.gang_waiting.reason.startswith("3 of 4 pods fit")
    assert stack.events.matching("gang_permitted", workload=key) == []
    assert all(not p.node_name for p in await stack.pods_of(key))

    await stack.backend.apply(node("c", cpu="2"))
    permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
    assert "c" in {b.node for b in permitted.gang_permitted.bindings}
    await stack.events.wait_for("bound", workload=key)
    await stack.wait_for_pods(key, lambda pods: len(pods) == 4 and all(p.node_name for p in pods))
    await stack.events.wait_for("running", workload=key)


async def test_admitted_gang_that_never_fits_is_rejected_when_its_time_is_up(
    bus: Bus, events: EventLog
) -> None:
    async with placement_stack(bus, events, gangpermit={"gang_timeout_s": 0.5}) as stack:
        await stack.backend.apply(node("a", cpu="2"))
        key = await submit_and_admit(stack, "huge", count=2)
        rejected = await events.wait_for("gang_rejected", workload=key, timeout_s=10)
        assert rejected.gang_rejected.reason == "GangTimedOut"
        assert "1 of 2 pods fit" in rejected.gang_rejected.message
        assert "Insufficient cpu" in rejected.gang_rejected.message
        assert sorted(p.name for p in rejected.gang_rejected.pods) == ["huge-main-0", "huge-main-1"]
        assert events.matching("gang_permitted", workload=key) == []


async def test_evict_command_stops_the_pods_then_eviction_completes(stack: Stack) -> None:
    await stack.backend.apply(node("a"))
    key = await submit_and_admit(stack, "victim", count=2, run_seconds=None)
    await stack.events.wait_for("running", workload=key, timeout_s=10)

    evict = events_pb2.EvictRequested(reason="Preempted", message="by ns/other", attempt=1)
    command = await stack.publish("evict_requested", evict, workload=key)
    completed = await stack.events.wait_for("eviction_completed", workload=key, timeout_s=10)
    assert completed.cause == command.event_id
    await stack.wait_for_pods(key, lambda pods: pods == [])


async def test_restarted_watcher_publishes_finished_once(stack: Stack) -> None:
    await stack.backend.apply(node("a"))
    key = await submit_and_admit(stack, "short", count=2, run_seconds="2")
    await stack.events.wait_for("running", workload=key, timeout_s=10)

    # Down while the pods finish: the restarted watcher still reports it, once.
    await stack.stop("watcher")
    await stack.wait_for_pods(key, lambda pods: all(p.phase == "Succeeded" for p in pods))
    await stack.start_watcher()
    await stack.events.wait_for("finished", workload=key, timeout_s=10)

    # Restarted again after reporting it: nothing is repeated. A config object applied after
    # the restart shows the watcher has caught up past the pods' changes.
    await stack.stop("watcher")
    await stack.start_watcher()
    await stack.backend.apply(FLAVOR)
    applied = await stack.events.wait_for("config_applied", timeout_s=10)
    assert applied.config_applied.name == "default"
    assert len(stack.events.matching("finished", workload=key)) == 1
    assert len(stack.events.matching("running", workload=key)) == 1


async def test_watcher_reports_queued_jobs_and_config_objects(stack: Stack) -> None:
    container = {"name": "c", "resources": {"requests": {"cpu": "1"}}}
    queued = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "labels": {"kueue.x-k8s.io/queue-name": "main"},
        },
        "spec": {"parallelism": 2, "template": {"spec": {"containers": [container]}}},
    }
    unqueued = {**queued, "metadata": {"name": "plain", "namespace": "ml"}}
    local_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "main", "namespace": "ml"},
        "spec": {"clusterQueue": "cq"},
    }
    for obj in (unqueued, queued, local_queue):
        await stack.backend.apply(obj)

    sub = await stack.events.wait_for("submitted")
    assert sub.workload.startswith("ml/job-train-")
    assert sub.submitted.queue_name == "main"
    assert (sub.submitted.owner.kind, sub.submitted.owner.name) == ("Job", "train")
    assert [(p.name, p.count) for p in sub.submitted.pod_sets] == [("main", 2)]
    applied = await stack.events.wait_for("config_applied")
    assert (applied.config_applied.kind, applied.config_applied.name) == ("LocalQueue", "ml/main")
    assert json.loads(applied.config_applied.manifest_json)["spec"] == {"clusterQueue": "cq"}

    await stack.backend.delete("LocalQueue", "main", namespace="ml")
    await stack.backend.delete("Job", "train", namespace="ml")
    deleted = await stack.events.wait_for("config_deleted")
    assert deleted.config_deleted.name == "ml/main"
    gone = await stack.events.wait_for("deleted", workload=sub.workload)
    assert len(stack.events.matching("submitted")) == 1  # the unqueued Job is not Kueue's
    assert gone.event_id != sub.event_id


async def test_bind_failure_rejects_the_whole_gang(stack: Stack) -> None:

    await stack.backend.apply(node("a"))
    await stack.backend.apply(node("b"))
    key = "ns/clash"
    starts = [PodSetStart(name="main", count=2, requests={"cpu": 1000})]
    await stack.backend.start_workload(key, pod_sets=starts)
    await stack.backend.bind("ns", "clash-main-0", "b")  # someone else bound it first

    bindings = [
        events_pb2.PodBinding(
            pod=events_pb2.PodRef(namespace="ns", name=f"clash-main-{i}"), node="a"
        )
        for i in range(2)
    ]
    permit = await stack.publish(
        "gang_permitted", events_pb2.GangPermitted(bindings=bindings), workload=key
    )
    rejected = await stack.events.wait_for("gang_rejected", workload=key, timeout_s=10)
    assert rejected.cause == permit.event_id
    assert rejected.gang_rejected.reason == "BindFailed"
    assert "pod ns/clash-main-0 to node a" in rejected.gang_rejected.message
    assert 'already bound to node "b"' in rejected.gang_rejected.message
    assert stack.events.matching("bound", workload=key) == []


@pytest.mark.parametrize("copied", [True, False], ids=["spec-in-admission", "control"])
async def test_a_binder_restarted_after_a_submitted_left_the_stream_starts_it_from_its_admission(
    stack: Stack, copied: bool
) -> None:
    await stack.backend.apply(node("a"))
    key, manifest = "ns/old", json.dumps(workload_manifest("old", count=1))
    submitted = events_pb2.WorkloadSubmitted(manifest_json=manifest, queue_name="main")
    await stack.publish("submitted", submitted, workload=key)
    await stack.stop("binder")
    # Its submitted leaves the stream, as after 7 days or 10 GiB of later events.
    await stack.bus.js.purge_stream(EVENTS_STREAM)
    await stack.start_binder()  # replays what is left: nothing about the workload
    assignment = events_pb2.PodSetAssignment(name="main", count=1, flavors={"cpu": "default"})
    admission = events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    admitted = events_pb2.WorkloadAdmitted(admission=admission, manifest_json=manifest * copied)
    await stack.publish("admitted", admitted, workload=key)
    if copied:
        await stack.events.wait_for("running", workload=key, timeout_s=10)
        assert [p.node_name for p in await stack.pods_of(key)] == ["a"]
    else:  # no copy (an admission from before copies) and none kept: ended with the reason
        finished = await stack.events.wait_for("finished", workload=key, timeout_s=10)
        assert "cannot be started: its manifest is no longer known" in finished.finished.message
        assert await stack.pods_of(key) == []


async def test_a_watcher_killed_and_restarted_from_scratch_publishes_each_fact_once(
    bus: Bus, events: EventLog
) -> None:
    """Restarted as if killed before it stored any revision or mark, past the duplicate window:
    it reads back from its own events what it published, so JetStream has nothing to drop.
    (Pods created unbound, so that the watcher sees them pending before its first restart.)"""
    async with placement_stack(bus, events, placed_first=False) as stack:
        await _restarted_watcher_tells_each_fact_once(stack)


async def _restarted_watcher_tells_each_fact_once(stack: Stack) -> None:
    await short_duplicate_window(stack.bus, WINDOW_S)
    key = await submit_and_admit(stack, "later", count=2, run_seconds="1")  # no node yet
    await stack.wait_for_pods(key, lambda pods: len(pods) == 2)  # pending, seen by the watcher
    await kill_and_restart_from_scratch(stack)

    await stack.backend.apply(node("a"))
    await stack.events.wait_for("running", workload=key, timeout_s=10)
    await stack.backend.apply(FLAVOR)  # a later batch: the running's is over, marks and all
    await stack.events.wait_for("config_applied", timeout_s=10)
    marks = await stack.bus.kv(WATCHER_BUCKET)
    namespace, _, name = key.partition("/")
    assert await marks.get(f"{CLUSTER}.wl.{namespace}.{name}") is None  # the events say it
    await kill_and_restart_from_scratch(stack)
    await stack.events.wait_for("finished", workload=key, timeout_s=10)
    await kill_and_restart_from_scratch(stack)
    await stack.backend.apply({**FLAVOR, "metadata": {"name": "second"}})
    await stack.events.wait_until(  # stored after anything the restart repeated
        lambda seen: any(e.config_applied.name == "second" for e in seen), timeout_s=10
    )

    facts = [e for e in stack.events.seen if e.workload == key and e.source.startswith("watcher")]
    assert len({e.event_id for e in facts}) == len(facts)
    assert [e.type for e in facts] == ["workload.running", "workload.finished"]


async def kill_and_restart_from_scratch(stack: Stack) -> None:
    """Stop the watcher, forget every revision and mark it stored (as if killed before it
    stored any), let the duplicate window pass, and start it again: it handles every pod of
    the cluster anew."""
    await stack.stop("watcher")
    marks = await stack.bus.kv(WATCHER_BUCKET)
    for key in [CLUSTER, *(await marks.snapshot(f"{CLUSTER}.wl.>"))]:
        await marks.delete(key)
    await outlive_the_window(stack.bus, WINDOW_S)
    await stack.start_watcher()
