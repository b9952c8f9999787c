"""PodGroup conditions from gang-permit's events (`watcher.group_status`): what kube-scheduler
would write, only on PodGroups the cluster holds, never reverting a success."""

from __future__ import annotations

from typing import Any

from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.group_status import PENDING_MAX, GroupStatusBook

V1BETA1 = "scheduling.k8s.io/v1beta1"
REF = ObjectRef(kind="PodGroup", name="g", namespace="ns")


def waiting(key: str, reason: str) -> pb.Envelope:
    return pb.Envelope(workload=key, gang_waiting=pb.GangWaiting(reason=reason))


def permitted(key: str) -> pb.Envelope:
    return pb.Envelope(workload=key, gang_permitted=pb.GangPermitted())


def preempted(key: str, *victims: str) -> pb.Envelope:
    return pb.Envelope(
        workload=key, placement_preempted=pb.PlacementPreempted(victims=list(victims))
    )


def conditions(book: GroupStatusBook, key: str = "ns/g") -> dict[str, Any]:
    status = book.status_of(key)
    assert status is not None
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_waiting_then_scheduled_and_never_unschedulable_again() -> None:
    book = GroupStatusBook()
    assert book.learn("ns/g", V1BETA1) is None  # nothing to write yet
    assert book.apply(waiting("ns/g", "3 of 4 pods pending")) == [REF]
    assert conditions(book) == {
        "PodGroupInitiallyScheduled": ("False", "Unschedulable", "3 of 4 pods pending")
    }
    assert book.apply(permitted("ns/g")) == [REF]
    assert book.apply(waiting("ns/g", "0/2 nodes are available")) == []
    assert conditions(book) == {"PodGroupInitiallyScheduled": ("True", "Scheduled", "")}


def test_only_pod_groups_the_cluster_holds_get_a_status_and_v1alpha2_names_it_as_v1_36() -> None:
    book = GroupStatusBook()
    assert book.apply(permitted("ns/g")) == []  # a Kueue workload's gang shares the key space
    assert book.status_of("ns/g") is None
    assert book.learn("ns/g", "scheduling.k8s.io/v1alpha2") == REF  # seen later: now desired
    assert conditions(book) == {"PodGroupScheduled": ("True", "Scheduled", "")}


def test_a_group_evicted_whole_is_a_disruption_target() -> None:
    book = GroupStatusBook()
    book.learn("ns/g", V1BETA1)
    assert book.apply(preempted("ns/urgent", "ns/g", "ns/lone-pod")) == [REF]
    assert conditions(book)["DisruptionTarget"] == (
        "True",
        "PreemptionByScheduler",
        "Preempted to place ns/urgent",
    )


def test_a_tree_waiting_under_its_root_tells_every_pod_group_in_it() -> None:
    book = GroupStatusBook()
    book.learn("ns/a", V1BETA1, parent="ns/root")
    book.learn("ns/b", V1BETA1, parent="ns/mid")
    book.learn_parent("ns/mid", "ns/root")  # a CompositePodGroup under the root
    book.learn("ns/other", V1BETA1)
    changed = book.apply(waiting("ns/root", "1 of 2 groups of ns/root fit"))
    assert [(r.namespace, r.name) for r in changed] == [("ns", "a"), ("ns", "b")]
    assert conditions(book, "ns/b") == {
        "PodGroupInitiallyScheduled": ("False", "Unschedulable", "1 of 2 groups of ns/root fit")
    }
    assert book.status_of("ns/other") is None


def test_a_reason_told_before_the_watch_shows_the_pod_group_is_written_once_it_does() -> None:
    """Gang-permit watches the cluster on its own: its `gang_waiting` may come first."""
    book = GroupStatusBook()
    assert book.apply(waiting("ns/g", "3 of 4 pods fit: 1 Insufficient cpu")) == []
    assert book.learn("ns/g", V1BETA1) == REF
    assert conditions(book) == {
        "PodGroupInitiallyScheduled": (
            "False",
            "Unschedulable",
            "3 of 4 pods fit: 1 Insufficient cpu",
        )
    }


def test_a_pod_group_shown_after_its_tree_was_said_to_wait_takes_the_reason() -> None:
    book = GroupStatusBook()
    book.learn("ns/a", V1BETA1, parent="ns/root")
    book.apply(waiting("ns/root", "1 of 2 groups of ns/root fit"))
    book.learn_parent("ns/mid", "ns/root")
    assert book.learn("ns/b", V1BETA1, parent="ns/mid") == ObjectRef(
        kind="PodGroup", name="b", namespace="ns"
    )
    assert conditions(book, "ns/b") == conditions(book, "ns/a")


def test_a_v1alpha2_group_permitted_before_it_shows_has_one_scheduled_condition() -> None:
    book = GroupStatusBook()
    book.apply(permitted("ns/g"))
    book.learn("ns/g", "scheduling.k8s.io/v1alpha2")
    book.apply(waiting("ns/g", "0/1 nodes are available"))  # a late one: never reverts
    status = book.status_of("ns/g")
    assert status is not None
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("PodGroupScheduled", "True")
    ]


def test_reasons_of_keys_never_shown_are_bounded() -> None:
    """Kueue workloads' gangs share the key space and never show as PodGroups."""
    book = GroupStatusBook()
    for n in range(PENDING_MAX + 10):
        book.apply(waiting(f"ns/w{n}", "waiting"))
    assert book.learn("ns/w0", V1BETA1) is None  # the oldest was let go
    assert book.learn(f"ns/w{PENDING_MAX + 9}", V1BETA1) is not None
