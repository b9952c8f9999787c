"""The chaos bench's reading of the stream: a workload's quota is held from its reservation or,
stored before it, its admission (docs/events.md, "Order"), and counted once; a decision about
a workload ended, or about an earlier life of its name, holds nothing (as admission's ledger)."""

from __future__ import annotations

import pytest
from google.protobuf.message import Message

from muster.bench.chaos_checks import ClusterBook, EventBook
from muster.bus import new_event
from muster.cluster.backend import ClusterChange
from muster.contracts.v1 import events_pb2 as pb


def admission(cpu: str) -> pb.Admission:
    assignment = pb.PodSetAssignment(name="main", count=1, resource_usage={"cpu": cpu})
    return pb.Admission(cluster_queue="cq", pod_set_assignments=[assignment])


def decision(field: str, workload: str, cpu: str, *, life: str = "") -> pb.Envelope:
    payload = (
        pb.QuotaReserved(admission=admission(cpu))
        if field == "quota_reserved"
        else pb.WorkloadAdmitted(admission=admission(cpu))
    )
    env = new_event(field, payload, cluster="c", workload=workload, source="admission/0")
    env.submitted_id = life
    return env


@pytest.mark.parametrize("order", [("quota_reserved", "admitted"), ("admitted", "quota_reserved")])
def test_quota_is_held_once_whichever_of_a_rounds_decisions_is_stored_first(
    order: tuple[str, str],
) -> None:
    book = EventBook(cohort_of={"cq": "all"}, quota={"all": 2000})
    for name, cpu in (("ns/a", "1"), ("ns/b", "1")):
        for field in order:
            book.apply(decision(field, name, cpu))
    assert book.books.count == 0
    assert not book.twice_admitted
    book.apply(decision(order[0], "ns/c", "1"))  # a third on a full cohort is seen at once
    assert book.books.count == 1


class Stream:
    """Events of workloads of 1 cpu, fed to `book` in the order the stream stored them."""

    def __init__(self, book: EventBook) -> None:
        self.book = book
        self.lives: dict[str, str] = {}  # workload -> its current submitted's event id
        self.evictions: dict[str, str] = {}  # workload -> its last evicted's event id

    def submitted(self, workload: str) -> str:
        env = self._store("submitted", workload, pb.WorkloadSubmitted())
        self.lives[workload] = env.event_id
        return env.event_id

    def decided(self, field: str, workload: str, *, life: str | None = None) -> None:
        """Admission's `field` about `workload` (naming `life`, else its current one)."""
        named = self.lives[workload] if life is None else life
        if field in ("quota_reserved", "admitted"):
            self.book.apply(decision(field, workload, "1", life=named))
            return
        payload = pb.WorkloadEvicted(reason="Preempted") if field == "evicted" else None
        env = self._store(field, workload, payload or pb.WorkloadRequeued(), life=named)
        if field == "evicted":
            self.evictions[workload] = env.event_id

    def reported(self, field: str, workload: str) -> None:
        """A fact from the binder or the watcher: eviction_completed, finished, deleted."""
        payloads = {
            "eviction_completed": pb.EvictionCompleted(eviction_id=self.evictions.get(workload)),
            "finished": pb.WorkloadFinished(),
            "deleted": pb.WorkloadDeleted(),
        }
        self._store(field, workload, payloads[field])

    def _store(self, field: str, workload: str, payload: Message, *, life: str = "") -> pb.Envelope:
        env = new_event(field, payload, cluster="c", workload=workload, source="test")
        env.submitted_id = life
        self.book.apply(env)
        return env


def full_beta() -> tuple[EventBook, Stream]:
    """A cohort of 2 cpu, one workload admitted in it."""
    book = EventBook(cohort_of={"cq": "beta"}, quota={"beta": 2000})
    stream = Stream(book)
    stream.submitted("ns/other")
    stream.decided("admitted", "ns/other")
    return book, stream


def test_an_admission_stored_after_its_workload_finished_holds_nothing() -> None:
    # As in a kept chaos run (seq 1137-1172): a preempted workload's pods succeeded as they were
    # being stopped; admission requeued and admitted it again in one round, decided before it
    # read the `finished`, stored after it. Admission released it on reading the `finished`;
    # the binder skipped it. A third workload then fills the cohort exactly.
    book, stream = full_beta()
    stream.submitted("ns/done")
    stream.decided("admitted", "ns/done")
    stream.decided("evicted", "ns/done")
    stream.reported("eviction_completed", "ns/done")
    stream.decided("requeued", "ns/done")
    stream.reported("finished", "ns/done")
    stream.decided("admitted", "ns/done")
    stream.submitted("ns/next")
    stream.decided("admitted", "ns/next")
    assert book.books.count == 0
    assert not book.twice_admitted


def test_a_decision_about_an_earlier_life_of_a_name_holds_nothing() -> None:
    book, stream = full_beta()
    first = stream.submitted("ns/again")
    stream.reported("deleted", "ns/again")
    stream.decided("admitted", "ns/again", life=first)  # decided before the deletion was read
    stream.submitted("ns/again")
    stream.decided("admitted", "ns/again", life=first)
    stream.submitted("ns/next")
    stream.decided("admitted", "ns/next")
    assert book.books.count == 0


@pytest.mark.parametrize("ended", ["finished", "deleted"])
def test_an_admission_over_quota_is_still_caught_beside_an_ended_workload(ended: str) -> None:
    book, stream = full_beta()
    stream.submitted("ns/gone")
    stream.decided("admitted", "ns/gone")
    stream.reported(ended, "ns/gone")
    stream.submitted("ns/a")
    stream.decided("admitted", "ns/a")
    assert book.books.count == 0
    stream.submitted("ns/b")
    stream.decided("quota_reserved", "ns/b")  # a third cpu of two: admission over-admitted
    assert book.books.count == 1
    assert book.books.first.startswith("cohort beta")


def test_a_name_deleted_and_submitted_again_holds_quota_in_its_new_life() -> None:
    book, stream = full_beta()
    stream.submitted("ns/again")
    stream.decided("admitted", "ns/again")
    stream.reported("deleted", "ns/again")
    stream.submitted("ns/again")
    stream.decided("admitted", "ns/again")
    assert book.books.count == 0
    stream.submitted("ns/b")
    stream.decided("admitted", "ns/b")
    assert book.books.count == 1
    assert not book.twice_admitted


def pod(name: str, *, node: str, phase: str = "Running") -> ClusterChange:
    obj = {
        "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": phase},
    }
    return ClusterChange(kind="Pod", type="MODIFIED", key=f"pod.ns.{name}", obj=obj, revision=0)


def test_a_node_over_committed_is_caught_and_its_pods_named() -> None:
    book = ClusterBook(cohort_of_workload={}, quota={})
    node = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "2"}}}
    book.apply(ClusterChange(kind="Node", type="ADDED", key="node.n", obj=node, revision=1))
    book.apply(pod("a", node="n"))
    book.apply(pod("b", node="n"))
    book.apply(pod("a", node="n", phase="Succeeded"))
    book.apply(pod("c", node="n"))
    assert book.node_overcommit.count == 0
    book.apply(pod("d", node="n"))
    assert book.node_overcommit.count == 1
    assert "on it pod.ns.b 1000m, pod.ns.c 1000m, pod.ns.d 1000m" in book.node_overcommit.first


def test_pods_run_count_under_their_gang_or_kueue_workload() -> None:
    book = ClusterBook(cohort_of_workload={}, quota={})
    gang = pod("g-0", node="n")
    gang.obj["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "g"}
    kueue = pod("w-main-0", node="n")
    kueue.obj["metadata"]["labels"] = {"muster.dev/workload": "w"}
    for change in (gang, kueue, pod("loose", node="n")):
        book.apply(change)
    assert book.ran == {"ns/g": {"uid-g-0"}, "ns/w": {"uid-w-main-0"}}


def checked(state: str) -> pb.Envelope:
    answer = pb.AdmissionCheckUpdated(check="prov", state=state)
    return new_event("admission_check", answer, cluster="c", workload="ns/w", source="test")


def test_an_admission_counts_as_ready_only_after_a_ready_since_its_last_eviction() -> None:
    # --checks: Kueue resets a workload's checks when it is evicted, so the Ready before the
    # eviction admits nothing after it.
    book = EventBook(cohort_of={"cq": "all"}, quota={"all": 4000}, checked_queues=frozenset({"cq"}))
    stream = Stream(book)
    stream.submitted("ns/w")
    stream.decided("quota_reserved", "ns/w")
    book.apply(checked("Ready"))
    stream.decided("admitted", "ns/w")
    assert not book.admitted_unready
    stream.decided("evicted", "ns/w")
    stream.reported("eviction_completed", "ns/w")
    stream.decided("requeued", "ns/w")
    stream.decided("quota_reserved", "ns/w")
    stream.decided("admitted", "ns/w")
    assert book.admitted_unready == {"ns/w"}
    assert [key for key, _ in book.completed_evictions] == ["ns/w"]


def admitted_pod(
    name: str, *, admission: int, phase: str = "Running", revision: int
) -> ClusterChange:
    change = pod(name, node="n", phase=phase)
    change.obj["metadata"]["labels"] = {
        "muster.dev/workload": "w",
        "muster.dev/admission": str(admission),
    }
    return ClusterChange(
        kind="Pod", type="MODIFIED", key=change.key, obj=change.obj, revision=revision
    )


def test_pods_of_two_admissions_at_once_are_caught() -> None:
    book = ClusterBook(cohort_of_workload={}, quota={})
    book.apply(admitted_pod("w-0", admission=10, revision=1))
    book.apply(admitted_pod("w-1", admission=10, revision=2))
    book.apply(admitted_pod("w-0", admission=10, phase="Failed", revision=3))
    assert book.two_places.count == 0
    book.apply(admitted_pod("w-2", admission=20, revision=4))  # w-1 of admission 10 still bound
    assert book.two_places.count == 1
    assert "ns/w" in book.two_places.first


def test_an_evicted_admissions_pod_still_bound_once_the_eviction_was_answered_is_caught() -> None:
    book = ClusterBook(cohort_of_workload={}, quota={})
    book.apply(admitted_pod("w-0", admission=10, revision=1))
    book.apply(admitted_pod("w-1", admission=10, revision=2))
    book.expect_gone("ns/w", before=15, revision=4)  # its eviction #15 answered by revision 4
    book.apply(admitted_pod("w-0", admission=10, phase="Failed", revision=3))
    assert book.left_running.count == 0  # not read up to the answer yet
    book.apply(admitted_pod("x", admission=0, revision=4))
    assert book.left_running.count == 1
    assert "still bound: pod.ns.w-1" in book.left_running.first
    book.expect_gone("ns/w", before=9, revision=4)  # an earlier admission's: none left
    assert book.left_running.count == 1


def test_a_routed_workloads_pods_count_in_the_cohort_its_admission_went_to() -> None:
    book = ClusterBook(cohort_of_workload={"ns/w": "alpha"}, quota={"alpha": 1000, "beta": 1000})
    book.cohort_of_admission[20] = "beta"  # admitted in beta's ClusterQueue, declared in alpha
    book.apply(admitted_pod("w-0", admission=20, revision=1))
    book.apply(admitted_pod("w-1", admission=20, revision=2))
    assert book.pods_outside_quota.count == 1
    assert book.pods_outside_quota.first.startswith("cohort beta")
