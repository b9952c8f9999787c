"""status.clusterName of a MultiKueue workload on the manager, in the status book, as Kueue
keeps it: set once a worker admits it, unset by any eviction at once (a deactivation too,
though the pods still stop: prepareForEviction's resetClusterNomination,
pkg/workload/evict/evict.go), kept once it finished; and the writer's way through Kueue's rule
that it is immutable once set. The book's tests are pure (end to end:
test_kube_multikueue_e2e)."""

from __future__ import annotations

from typing import Any

from test_kube_status_book import WL, admission, config
from test_kube_status_checks import workload_of_job

from muster.bus import new_event
from muster.cluster.errors import InvalidObjectError
from muster.cluster.kube import KubeBackend, ObjectRef, StatusWriter, StatusWriterSettings
from muster.cluster.kube.transport import Transport
from muster.contracts.v1 import events_pb2 as pb
from muster.devtools.apiserver import ApiServer
from muster.watcher.kueue_status.book import StatusBook

MANAGER = "manager"


def told(field: str, payload: Any, *, cluster: str = "east") -> pb.Envelope:
    """An event about ml/train from `cluster` (a worker's admission, eviction or end)."""
    return new_event(field, payload, cluster=cluster, workload="ml/train", source="test")


def admitted(cluster: str) -> pb.Envelope:
    return told("admitted", pb.WorkloadAdmitted(admission=admission()), cluster=cluster)


def evicted(reason: str, message: str = "evicted") -> pb.Envelope:
    return told("evicted", pb.WorkloadEvicted(reason=reason, message=message))


def running_in_east() -> StatusBook:
    """ml/train dispatched to east and admitted there, as the manager's book has it."""
    made = StatusBook(cluster=MANAGER)
    for env in (
        config("ClusterQueue", "cq"),
        config("LocalQueue", "ml/lq", {"clusterQueue": "cq"}),
        told("submitted", pb.WorkloadSubmitted(queue_name="lq"), cluster=MANAGER),
        told("quota_reserved", pb.QuotaReserved(admission=admission()), cluster=MANAGER),
        admitted("east"),
    ):
        made.apply(env)
    assert status(made)["clusterName"] == "east"
    return made


def status(made: StatusBook) -> dict[str, Any]:
    return made.status_of(WL) or {}


def condition(made: StatusBook, type_: str) -> tuple[str, str]:
    for found in status(made)["conditions"]:
        if found["type"] == type_:
            return found["status"], found["reason"]
    return "", ""


def test_an_eviction_unsets_the_cluster_at_once_though_the_pods_still_stop() -> None:
    for reason in ("ClusterLost", "Preempted", "PodsReadyTimeout", "AdmissionCheck"):
        made = running_in_east()
        assert made.apply(evicted(reason)) >= {WL}
        assert "clusterName" not in status(made), reason
        # Still admitted until its pods are gone, as in Kueue; the cluster is unset already.
        assert condition(made, "Admitted") == ("True", "Admitted")
        assert condition(made, "Evicted") == ("True", reason)
        made.apply(told("eviction_completed", pb.EvictionCompleted()))
        assert "clusterName" not in status(made), reason
        assert condition(made, "QuotaReserved")[0] == "False"


def test_a_deactivated_workload_names_no_cluster_while_it_stays_inactive() -> None:
    # The user's (spec.active false: admission evicts it, Deactivated, its pods stop), and
    # admission's own (a check Rejected it: InactiveWorkload, its quota given back at once).
    for reason, said in (
        ("Deactivated", "Deactivated"),
        ("InactiveWorkload", "DeactivatedDueToAdmissionCheck"),
    ):
        made = running_in_east()
        off = pb.WorkloadActiveChanged(active=False)
        made.apply(told("active_changed", off, cluster=MANAGER))
        assert status(made)["clusterName"] == "east"  # running: admission's eviction tells it
        made.apply(evicted(reason, "The workload is deactivated"))
        assert "clusterName" not in status(made), reason
        assert condition(made, "Evicted") == ("True", said)
        made.apply(told("eviction_completed", pb.EvictionCompleted()))
        assert "clusterName" not in status(made), reason
        assert condition(made, "QuotaReserved") == ("False", "Deactivated")


def test_a_workload_moved_to_another_worker_names_the_new_one() -> None:
    made = running_in_east()
    made.apply(evicted("ClusterLost", "worker cluster east was lost"))
    made.apply(told("requeued", pb.WorkloadRequeued(reason="Evicted", message="requeued")))
    assert "clusterName" not in status(made)
    made.apply(told("quota_reserved", pb.QuotaReserved(admission=admission()), cluster=MANAGER))
    assert "clusterName" not in status(made)  # reserved, not dispatched yet
    made.apply(admitted("west"))
    assert status(made)["clusterName"] == "west"


def test_a_finished_workload_keeps_its_cluster_unless_it_was_evicted_first() -> None:
    made = running_in_east()
    made.apply(told("finished", pb.WorkloadFinished(succeeded=True)))
    assert status(made)["clusterName"] == "east"
    assert condition(made, "Finished") == ("True", "Succeeded")

    stopping = running_in_east()  # its pods ended while they were being stopped
    stopping.apply(evicted("Preempted"))
    stopping.apply(told("finished", pb.WorkloadFinished(succeeded=True)))
    assert "clusterName" not in status(stopping)


def test_a_workload_admitted_in_its_own_cluster_names_none() -> None:
    made = running_in_east()
    made.apply(evicted("Preempted"))
    made.apply(told("requeued", pb.WorkloadRequeued(reason="Evicted", message="requeued")))
    made.apply(admitted(MANAGER))
    assert "clusterName" not in status(made)


class KueueCluster(Transport):
    """The backend's transport, refusing what Kueue's Workload CRD refuses of a status write
    ("clusterName is immutable once set": from one worker to another without unsetting it
    first), which the API-server stand-in does not check; the clusterName of each write it
    let through, and of each it refused."""

    def __init__(self, inner: Transport, server: ApiServer) -> None:
        super().__init__(inner.api, writes=inner.writes, owns_client=False)
        self.server = server
        self.written: list[Any] = []
        self.refused: list[Any] = []

    async def checked(self, method: str, path: str, **kw: Any) -> Any:
        status = (kw.get("body") or {}).get("status") or {}
        if method == "PATCH" and path.endswith("/status") and "clusterName" in status:
            rt = self.server.registry.by_key(("kueue.x-k8s.io", "workloads"))
            assert rt is not None
            *_, namespace, _, name, _ = path.split("/")
            stored = self.server.api.get(rt, namespace, name).get("status") or {}
            was, now = stored.get("clusterName"), status["clusterName"]
            if was and now and was != now:
                self.refused.append(now)
                raise InvalidObjectError(kw["obj"], ["status: clusterName is immutable once set"])
            self.written.append(now)
        return await super().checked(method, path, **kw)


async def test_a_move_to_another_worker_is_written_through_no_cluster(
    server: ApiServer, backend: KubeBackend
) -> None:
    ref = await workload_of_job(server, backend)
    kueue = KueueCluster(backend.transport, server)
    statuses = StatusWriter(kueue, settings=StatusWriterSettings(qps=20.0, burst=1))
    made = running_in_east()
    statuses.desire(ref, status(made))
    await statuses.flush()
    # Evicted from east, requeued and admitted in west before the writer's next turn: the
    # three desires coalesce into one status, west's.
    made.apply(evicted("ClusterLost", "worker cluster east was lost"))
    statuses.desire(ref, status(made))
    made.apply(told("requeued", pb.WorkloadRequeued(reason="Evicted", message="requeued")))
    made.apply(admitted("west"))
    statuses.desire(ref, status(made))
    await statuses.flush()
    await statuses.close()
    assert statuses.stats.dropped == 0
    assert kueue.written == ["east", None, "west"]
    assert_stored_admitted_in(server, ref, "west")


def assert_stored_admitted_in(server: ApiServer, ref: ObjectRef, cluster: str) -> None:
    """The API server's Workload `ref` says Admitted in `cluster`."""
    rt = server.registry.by_key(("kueue.x-k8s.io", "workloads"))
    assert rt is not None
    stored = server.api.get(rt, ref.namespace, ref.name)["status"]
    assert stored["clusterName"] == cluster
    assert {c["type"]: c["status"] for c in stored["conditions"]}["Admitted"] == "True"


def moved_to_west(made: StatusBook) -> None:
    """East lost: ml/train evicted, requeued and admitted in west."""
    made.apply(evicted("ClusterLost", "worker cluster east was lost"))
    made.apply(told("requeued", pb.WorkloadRequeued(reason="Evicted", message="requeued")))
    made.apply(admitted("west"))


async def test_a_restarted_writer_moves_the_stored_cluster_through_no_cluster(
    server: ApiServer, backend: KubeBackend
) -> None:
    ref = await workload_of_job(server, backend)
    kueue = KueueCluster(backend.transport, server)
    settings = StatusWriterSettings(qps=20.0, burst=1)
    made = running_in_east()
    before = StatusWriter(kueue, settings=settings)
    before.desire(ref, status(made))
    await before.flush()
    await before.close()
    # The watcher restarts; meanwhile ml/train moved to west. The new writer knows nothing
    # it wrote: its first write names west over the stored east, and is refused.
    moved_to_west(made)
    after = StatusWriter(kueue, settings=settings)
    after.desire(ref, status(made))
    await after.flush()
    await after.close()
    assert after.stats.dropped == 0
    assert kueue.refused == ["west"]
    assert kueue.written == ["east", None, "west"]
    assert_stored_admitted_in(server, ref, "west")


async def test_a_restarted_writer_naming_the_stored_cluster_writes_once(
    server: ApiServer, backend: KubeBackend
) -> None:
    ref = await workload_of_job(server, backend)
    kueue = KueueCluster(backend.transport, server)
    made = running_in_east()
    for _ in range(2):  # the second writer: after a restart, the same status again
        statuses = StatusWriter(kueue, settings=StatusWriterSettings(qps=20.0, burst=1))
        statuses.desire(ref, status(made))
        await statuses.flush()
        await statuses.close()
        assert statuses.stats.writes == 1
        assert statuses.stats.retries == 0
    assert kueue.written == ["east", "east"]
    assert kueue.refused == []
