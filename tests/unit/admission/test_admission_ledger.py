"""The ledger's memory of finished workloads: it refuses their resubmission, within a bound."""

from __future__ import annotations

from admission_stream import submitted, workload

from muster.admission.fact_reader import fact_of
from muster.admission.facts import Submit
from muster.admission.ledger import Ledger
from muster.api.model import Workload, WorkloadKey


def spec(name: str) -> Workload:
    fact = fact_of(submitted(workload(name)))
    assert isinstance(fact, Submit)
    return fact.workload


def submit(ledger: Ledger, name: str) -> bool:
    """Whether `ledger` took a submission of workload `name` as new."""
    return ledger.submit(spec(name), cluster="local", generation=1, at_s=0.0) is not None


def test_a_finished_workload_submitted_again_is_a_duplicate() -> None:
    ledger = Ledger()
    assert submit(ledger, "a")
    ledger.finish(WorkloadKey("ns/a"))
    assert not submit(ledger, "a")


def test_only_the_newest_finished_workloads_are_remembered() -> None:
    ledger = Ledger(finished_kept=2)
    for name in ("a", "b", "c"):
        assert submit(ledger, name)
        ledger.finish(WorkloadKey(f"ns/{name}"))
    assert list(ledger.finished) == ["ns/b", "ns/c"]
    assert submit(ledger, "a")  # forgotten: the oldest went first
    assert not submit(ledger, "c")


def test_deleting_a_finished_workload_lets_its_name_be_used_again() -> None:
    ledger = Ledger()
    submit(ledger, "a")
    ledger.finish(WorkloadKey("ns/a"))
    ledger.delete(WorkloadKey("ns/a"))
    assert submit(ledger, "a")
