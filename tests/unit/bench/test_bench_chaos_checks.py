"""The chaos bench's reading of the stream: a workload's quota is held from its reservation or,
stored before it, its admission (docs/events.md, "Order"), and counted once."""

from __future__ import annotations

import pytest

from muster.bench.chaos_checks import EventBook
from muster.bus import new_event
from muster.contracts.v1 import events_pb2 as pb


def admission(cpu: str) -> pb.Admission:
    assignment = pb.PodSetAssignment(name="main", count=1, resource_usage={"cpu": cpu})
    return pb.Admission(cluster_queue="cq", pod_set_assignments=[assignment])


def decision(field: str, workload: str, cpu: str) -> pb.Envelope:
    payload = (
        pb.QuotaReserved(admission=admission(cpu))
        if field == "quota_reserved"
        else pb.WorkloadAdmitted(admission=admission(cpu))
    )
    return new_event(field, payload, cluster="c", workload=workload, source="admission/0")


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
