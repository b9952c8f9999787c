"""SimBackend against a real nats-server: apply and list, start, bind and stop workloads, watch."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from muster.api import workload_name_for_job
from muster.api.model import Toleration
from muster.bus import Bus
from muster.cluster import (
    BindConflictError,
    ClusterChange,
    ClusterError,
    InvalidObjectError,
    NotFoundError,
    PodSetStart,
    PodView,
)
from muster.cluster.sim import ManualClock, SimBackend, SimStore, StoredObject, pod_key

pytestmark = pytest.mark.timeout(30)

GI = 2**30 * 1000  # one Gi in milli-units


@pytest.fixture
async def sim(bus: Bus) -> SimBackend:
    store = await SimStore.open(bus.kv, cluster="local")
    uids = iter(range(1_000_000))
    return SimBackend(store, clock=ManualClock(), new_uid=lambda: f"uid-{next(uids)}")


def node(name: str, *, cpu: str = "8", memory: str = "32Gi", **extra: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": "a"}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory}},
    }
    manifest.update(extra)
    return manifest


def pod_set(name: str = "main", *, count: int = 2, **extra: Any) -> PodSetStart:
    return PodSetStart(name=name, count=count, requests={"cpu": 500, "memory": GI}, **extra)


async def pods_of(sim: SimBackend, workload: str) -> list[PodView]:
    return [p for p in await sim.list_pods() if p.workload_key == workload]


# --- apply and list --------------------------------------------------------------------------


async def test_lists_applied_nodes_with_quantities_in_milli_units(sim: SimBackend) -> None:
    await sim.apply(node("b.example", cpu="500m"))
    await sim.apply(
        node("a", spec={"taints": [{"key": "gpu", "effect": "NoSchedule"}], "unschedulable": True})
    )

    a, b = await sim.list_nodes()

    assert (a.name, b.name) == ("a", "b.example")
    assert b.allocatable == {"cpu": 500, "memory": 32 * GI, "pods": 110_000}
    assert (b.ready, b.unschedulable, b.labels) == (True, False, {"pool": "a"})
    assert (a.unschedulable, [t.key for t in a.taints]) == (True, ["gpu"])


async def test_node_written_not_ready_stays_not_ready(sim: SimBackend) -> None:
    down = node("down")
    down["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    await sim.apply(down)
    (view,) = await sim.list_nodes()
    assert not view.ready


async def test_replace_keeps_uid_creation_time_and_status(sim: SimBackend) -> None:
    await sim.apply(node("n", cpu="4"))
    stored = await sim.store.get("node.n")
    assert stored is not None
    manifest = node("n", cpu="4")
    del manifest["status"]
    manifest["metadata"]["labels"] = {"pool": "b"}

    await sim.apply(manifest)

    replaced = await sim.store.get("node.n")
    assert replaced is not None
    assert replaced.obj["metadata"]["uid"] == stored.obj["metadata"]["uid"]
    assert (
        replaced.obj["metadata"]["creationTimestamp"] == stored.obj["metadata"]["creationTimestamp"]
    )
    assert replaced.obj["status"] == stored.obj["status"]
    (view,) = await sim.list_nodes()
    assert (view.labels, view.allocatable["cpu"]) == ({"pool": "b"}, 4000)


async def test_refuses_a_node_with_bad_quantities_naming_each_field(sim: SimBackend) -> None:
    bad = node("n", cpu="lots", memory="1GB")
    with pytest.raises(InvalidObjectError) as caught:
        await sim.apply(bad)
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "status.allocatable.cpu",
        "status.allocatable.memory",
    ]
    assert str(caught.value).startswith("Node/n: ")
    assert await sim.list_nodes() == []


async def test_stores_any_other_kind_under_its_kind_and_namespace(sim: SimBackend) -> None:
    await sim.apply({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
                     "metadata": {"name": "team-a"}, "spec": {}})  # fmt: skip
    await sim.apply({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}})

    queue = await sim.store.get("obj.ClusterQueue._.team-a")
    job = await sim.store.get("obj.Job.default.j")
    assert queue is not None
    assert job is not None
    assert job.obj["metadata"]["namespace"] == "default"
    assert queue.obj["metadata"]["uid"]  # stamped, stable for the same identity
    assert await sim.delete("Job", "j", namespace="default")
    assert not await sim.delete("Job", "j", namespace="default")


async def test_applied_pod_is_pending_with_a_uid_and_the_default_scheduler(
    sim: SimBackend,
) -> None:
    limits = {"resources": {"limits": {"cpu": "2"}}}
    await sim.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [limits]},
        }
    )
    (pod,) = await sim.list_pods()
    assert (pod.namespace, pod.phase, pod.scheduler_name) == (
        "default",
        "Pending",
        "default-scheduler",
    )
    assert pod.requests == {"cpu": 2000}  # a limit without a request is the request
    assert (pod.uid, pod.workload, pod.workload_key) == ("uid-0", "", "")


async def test_refuses_a_pod_with_bad_requests_or_run_time(sim: SimBackend) -> None:
    bad = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "annotations": {"muster.dev/run-seconds": "soon"}},
           "spec": {"containers": [{"resources": {"requests": {"cpu": "-1"}}}]}}  # fmt: skip
    with pytest.raises(InvalidObjectError) as caught:
        await sim.apply(bad)
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "spec.containers[0].resources.requests.cpu",
        'metadata.annotations["muster.dev/run-seconds"]',
    ]


# --- start_workload --------------------------------------------------------------------------


async def test_starts_count_pods_per_podset_with_placement_and_requests(sim: SimBackend) -> None:
    gpu = Toleration(key="gpu", operator="Exists", effect="NoSchedule")
    await sim.start_workload(
        "ml/train",
        pod_sets=[
            pod_set("leader", count=1),
            pod_set("worker", count=3, node_selector={"pool": "a"}, tolerations=(gpu,)),
        ],
    )

    pods = await pods_of(sim, "ml/train")

    assert [p.name for p in pods] == [
        "train-leader-0",
        "train-worker-0",
        "train-worker-1",
        "train-worker-2",
    ]
    worker = pods[1]
    assert (worker.namespace, worker.workload, worker.pod_set) == ("ml", "train", "worker")
    assert (worker.phase, worker.node_name, worker.scheduler_name) == ("Pending", "", "muster")
    assert worker.requests == {"cpu": 500, "memory": GI}
    assert worker.node_selector == {"pool": "a"}
    assert worker.tolerations == (gpu,)
    assert pods[0].node_selector == {}
    assert len({p.uid for p in pods}) == 4


async def test_start_is_idempotent_and_leaves_existing_pods_alone(sim: SimBackend) -> None:
    await sim.start_workload("ml/train", pod_sets=[pod_set(count=2)])
    await sim.bind("ml", "train-main-0", "n1")
    before = await pods_of(sim, "ml/train")

    await sim.start_workload("ml/train", pod_sets=[pod_set(count=2)])

    assert await pods_of(sim, "ml/train") == before
    assert before[0].node_name == "n1"


async def test_copies_run_seconds_from_the_stored_workload(sim: SimBackend) -> None:
    await sim.apply({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                     "metadata": {"name": "w", "namespace": "ml",
                                  "annotations": {"muster.dev/run-seconds": "30"}}})  # fmt: skip
    await sim.start_workload("ml/w", pod_sets=[pod_set(count=1)])
    (pod,) = await pods_of(sim, "ml/w")
    assert pod.run_seconds == 30.0


async def test_copies_run_seconds_from_the_job_a_workload_is_for(sim: SimBackend) -> None:
    await sim.apply({"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {"name": "j", "namespace": "ml",
                                  "annotations": {"muster.dev/run-seconds": "2.5"}}})  # fmt: skip
    job = await sim.store.get("obj.Job.ml.j")
    assert job is not None
    workload = workload_name_for_job("j", job.obj["metadata"]["uid"])

    await sim.start_workload(f"ml/{workload}", pod_sets=[pod_set(count=1)])

    (pod,) = await pods_of(sim, f"ml/{workload}")
    assert pod.run_seconds == 2.5


async def test_podset_annotations_win_over_the_workload(sim: SimBackend) -> None:
    await sim.start_workload(
        "ml/w", pod_sets=[pod_set(count=1, annotations={"muster.dev/run-seconds": "7"})]
    )
    (pod,) = await pods_of(sim, "ml/w")
    assert pod.run_seconds == 7.0


async def test_start_on_nodes_creates_only_the_pods_named_each_bound_in_one_write(
    sim: SimBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []
    create = sim.store.create

    async def counted(key: str, obj: dict[str, Any]) -> int:
        revision = await create(key, obj)  # a pod that exists raises: not written
        written.append(key)
        return revision

    async def no_update(key: str, obj: dict[str, Any], *, revision: int) -> int:
        raise AssertionError(f"a pod created on its node was written again: {key}")

    monkeypatch.setattr(sim.store, "create", counted)
    monkeypatch.setattr(sim.store, "update", no_update)
    placed = {"w-main-1": "n2", "w-main-0": "n1"}  # a permit's part: two of three pods

    await sim.start_workload("ml/w", pod_sets=[pod_set(count=3)], admission=4, nodes=placed)
    await sim.start_workload("ml/w", pod_sets=[pod_set(count=3)], admission=4, nodes=placed)

    pods = {p.name: p for p in await pods_of(sim, "ml/w")}
    assert {name: p.node_name for name, p in pods.items()} == placed
    assert all(p.admission == 4 and p.phase == "Pending" for p in pods.values())
    assert sorted(written) == ["pod.ml.w-main-0", "pod.ml.w-main-1"]  # once each, bound
    stored = await sim.store.get("pod.ml.w-main-0")
    assert stored is not None
    conditions = stored.obj["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in conditions] == [("PodScheduled", "True")]


async def test_start_on_nodes_binds_its_own_unbound_pod_and_waits_for_another_admissions(
    sim: SimBackend,
) -> None:
    await sim.start_workload("ml/w", pod_sets=[pod_set(count=2)], admission=4)  # unbound
    await sim.start_workload("ml/w", pod_sets=[pod_set(count=2)], admission=4, nodes={
        "w-main-0": "n1"})  # fmt: skip
    assert {p.name: p.node_name for p in await pods_of(sim, "ml/w")} == {
        "w-main-0": "n1", "w-main-1": ""}  # fmt: skip
    with pytest.raises(ClusterError, match="a pod of admission 4 has its name still") as caught:
        await sim.start_workload("ml/w", pod_sets=[pod_set(count=2)], admission=9, nodes={
            "w-main-1": "n2"})  # fmt: skip
    assert caught.value.temporary
    assert {p.name: p.node_name for p in await pods_of(sim, "ml/w")}["w-main-1"] == ""


# --- bind ------------------------------------------------------------------------------------


async def test_bind_sets_the_node_once(sim: SimBackend) -> None:
    await sim.start_workload("ml/w", pod_sets=[pod_set(count=1)])

    await sim.bind("ml", "w-main-0", "n1")
    await sim.bind("ml", "w-main-0", "n1")  # the same node again: nothing happens

    (pod,) = await pods_of(sim, "ml/w")
    assert pod.node_name == "n1"
    with pytest.raises(BindConflictError, match='already bound to node "n1"') as caught:
        await sim.bind("ml", "w-main-0", "n2")
    assert (caught.value.bound_to, caught.value.wanted) == ("n1", "n2")


async def test_bind_of_a_pod_it_created_needs_no_read(
    sim: SimBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    await sim.start_workload("ml/w", pod_sets=[pod_set(count=2)])
    reads: list[str] = []
    get = sim.store.get

    async def counted(key: str) -> StoredObject | None:
        reads.append(key)
        return await get(key)

    monkeypatch.setattr(sim.store, "get", counted)
    await sim.bind("ml", "w-main-0", "n1")
    await sim.bind("ml", "w-main-1", "n2")

    assert reads == []
    assert sorted(p.node_name for p in await pods_of(sim, "ml/w")) == ["n1", "n2"]


async def test_bind_reads_again_when_the_pod_changed_since_it_was_created(
    sim: SimBackend,
) -> None:
    await sim.start_workload("ml/w", pod_sets=[pod_set(count=2)])
    for name, change in (("w-main-0", {"labels": "relabelled"}), ("w-main-1", {"node": "n9"})):
        stored = await sim.store.get(pod_key("ml", name))
        assert stored is not None
        obj = stored.obj
        if "labels" in change:
            obj["metadata"]["labels"]["extra"] = change["labels"]
        else:
            obj["spec"]["nodeName"] = change["node"]  # bound by someone else meanwhile
        await sim.store.update(stored.key, obj, revision=stored.revision)

    await sim.bind("ml", "w-main-0", "n1")
    with pytest.raises(BindConflictError, match='already bound to node "n9"'):
        await sim.bind("ml", "w-main-1", "n1")

    relabelled = await sim.store.get(pod_key("ml", "w-main-0"))
    assert relabelled is not None
    assert relabelled.obj["spec"]["nodeName"] == "n1"
    assert relabelled.obj["metadata"]["labels"]["extra"] == "relabelled"  # kept, not overwritten


async def test_binding_a_missing_pod_fails(sim: SimBackend) -> None:
    with pytest.raises(NotFoundError, match="Pod/ml/nope"):
        await sim.bind("ml", "nope", "n1")


# --- stop_workload ---------------------------------------------------------------------------


async def test_stop_deletes_the_workloads_pods_only(sim: SimBackend) -> None:
    await sim.start_workload("ml/a", pod_sets=[pod_set(count=3)])
    await sim.start_workload("ml/b", pod_sets=[pod_set(count=1)])
    await sim.bind("ml", "a-main-0", "n1")

    await sim.stop_workload("ml/a")
    await sim.stop_workload("ml/a")  # idempotent

    assert [p.name for p in await sim.list_pods()] == ["b-main-0"]


async def test_stop_before_an_admission_keeps_that_admissions_pods_and_later_ones(
    sim: SimBackend,
) -> None:
    await sim.start_workload("ml/a", pod_sets=[pod_set(count=2)], admission=10)
    await sim.stop_workload("ml/a", before=10, pod_sets={"main": 2})  # an eviction of before
    assert [p.name for p in await pods_of(sim, "ml/a")] == ["a-main-0", "a-main-1"]

    await sim.stop_workload("ml/a", before=12, pod_sets={"main": 4})  # more names than pods
    assert await pods_of(sim, "ml/a") == []


async def test_stop_by_name_leaves_a_pod_of_that_name_that_is_not_the_workloads(
    sim: SimBackend,
) -> None:
    await sim.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a-main-0",
                     "namespace": "ml"}, "spec": {"containers": []}})  # fmt: skip
    await sim.stop_workload("ml/a", pod_sets={"main": 1})
    assert [p.name for p in await sim.list_pods()] == ["a-main-0"]


async def test_bind_and_delete_with_a_uid_leave_a_pod_made_again_alone(sim: SimBackend) -> None:
    await sim.start_workload("ml/w", pod_sets=[pod_set(count=1)], admission=3)
    (old,) = await sim.list_pods()
    await sim.stop_workload("ml/w")
    await sim.start_workload("ml/w", pod_sets=[pod_set(count=1)], admission=9)

    with pytest.raises(ClusterError, match="Precondition failed: UID in precondition"):
        await sim.bind("ml", "w-main-0", "n1", uid=old.uid)
    assert not await sim.delete("Pod", "w-main-0", namespace="ml", uid=old.uid)
    (new,) = await sim.list_pods()
    assert (new.node_name, new.uid != old.uid) == ("", True)
    await sim.bind("ml", "w-main-0", "n1", uid=new.uid)


# --- watch -----------------------------------------------------------------------------------


async def take(changes: AsyncIterator[ClusterChange], count: int) -> list[ClusterChange]:
    return [await anext(changes) for _ in range(count)]


async def test_watch_names_the_kind_of_every_change(sim: SimBackend) -> None:
    await sim.apply(node("n1"))
    await sim.apply({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                     "metadata": {"name": "main", "namespace": "ml"}})  # fmt: skip
    async with contextlib.aclosing(sim.watch()) as changes:
        initial = await take(changes, 2)
        await sim.start_workload("ml/w", pod_sets=[pod_set(count=1)])
        await sim.stop_workload("ml/w")
        later = await take(changes, 2)

    assert [(c.kind, c.type) for c in initial + later] == [
        ("Node", "ADDED"),
        ("LocalQueue", "ADDED"),
        ("Pod", "ADDED"),
        ("Pod", "DELETED"),
    ]
    assert later[1].obj["metadata"]["labels"] == {"muster.dev/workload": "w"}

    async with contextlib.aclosing(sim.watch(from_revision=later[1].revision)) as changes:
        await sim.apply(node("n2"))
        (resumed,) = await take(changes, 1)
    assert (resumed.kind, resumed.key) == ("Node", "node.n2")


async def test_close_drains_a_connection_it_opened(nats_server: str) -> None:
    sim = await SimBackend.connect(nats_server, cluster="local")
    await sim.apply(node("n1"))
    await sim.close()
    await sim.close()  # twice is fine
    again = await SimBackend.connect(nats_server, cluster="local")
    try:
        assert [n.name for n in await again.list_nodes()] == ["n1"]
    finally:
        await again.close()


def job(name: str, **status: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ml",
                         "labels": {"kueue.x-k8s.io/queue-name": "main"}},
            "spec": {"suspend": True, "template": {"spec": {"containers": []}}},
            "status": status}  # fmt: skip


async def test_placement_watch_reads_nodes_pods_and_priorities_only(sim: SimBackend) -> None:
    await sim.apply(node("n1"))
    await sim.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": "high"}, "value": 1000})  # fmt: skip
    await sim.apply(job("j"))
    await sim.start_workload("ml/w", pod_sets=[pod_set(count=1)])
    pod = await sim.store.get(pod_key("ml", "w-main-0"))
    assert pod is not None
    await sim.apply(job("j", active=1))  # the last write: not one placement reads

    assert await sim.current_revision(selection="placement") == pod.revision
    assert await sim.current_revision() > pod.revision
    async with contextlib.aclosing(sim.watch(selection="placement")) as changes:
        initial = await take(changes, 3)
        await sim.apply(job("j", active=0))
        await sim.apply(node("n2"))
        (later,) = await take(changes, 1)

    assert [(c.kind, c.type) for c in initial] == [
        ("Node", "ADDED"),
        ("PriorityClass", "ADDED"),
        ("Pod", "ADDED"),
    ]
    assert (later.kind, later.key) == ("Node", "node.n2")
    assert await sim.current_revision(selection="placement") == later.revision
