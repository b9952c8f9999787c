"""The table helpers: outcomes, flavors and seconds as people read them."""

from __future__ import annotations

import pytest

from muster.api.model import (
    Admission,
    AdmissionCheckState,
    Condition,
    ObjectMeta,
    PodSetAssignment,
    Workload,
)
from muster.sim.report import aligned, flavors_of, outcome, seconds


def workload(
    *,
    conditions: dict[str, tuple[str, str]] | None = None,
    active: bool = True,
    checks: tuple[str, ...] = (),
    flavors: tuple[dict[str, str], ...] = (),
) -> Workload:
    """A Workload whose status has `conditions` ({type: (status, message)})."""
    return Workload(
        meta=ObjectMeta(name="w", namespace="ns"),
        active=active,
        conditions=tuple(
            Condition(type=type_, status=status, reason="Why", message=message)  # type: ignore[arg-type]
            for type_, (status, message) in (conditions or {}).items()
        ),
        admission_checks=tuple(
            AdmissionCheckState(name=f"c{i}", state=state)  # type: ignore[arg-type]
            for i, state in enumerate(checks)
        ),
        admission=Admission(
            cluster_queue="cq",
            pod_set_assignments=tuple(
                PodSetAssignment(name=f"ps{i}", flavors=f, count=1, resource_usage={})
                for i, f in enumerate(flavors)
            ),
        )
        if flavors
        else None,
    )


T, F = "True", "False"


@pytest.mark.parametrize(
    ("wl", "expected"),
    [
        (workload(conditions={"Admitted": (T, ""), "Finished": (T, "")}), "Finished"),
        (workload(active=False, checks=("Ready", "Rejected")), "Rejected"),
        (workload(active=False), "Inactive"),
        (
            workload(active=False, conditions={"Evicted": (T, "")}),
            "Inactive",
        ),
        (workload(conditions={"QuotaReserved": (T, ""), "Admitted": (T, "")}), "Running"),
        (workload(conditions={"Evicted": (T, "preempted")}), "Evicted"),
        (workload(conditions={"QuotaReserved": (T, "")}), "Pending: waiting for admission checks"),
        (
            workload(conditions={"QuotaReserved": (F, "insufficient  quota\\nfor cpu")}),
            "Pending: insufficient quota\\nfor cpu",
        ),
        (
            workload(
                conditions={"QuotaReserved": (F, "couldn't assign flavors to pod set main: no")}
            ),
            "Pending: no",
        ),
        (workload(conditions={"QuotaReserved": (F, "x" * 90)}), "Pending: " + "x" * 79 + "…"),
        (workload(conditions={"QuotaReserved": (F, "")}), "Pending: Why"),
        (workload(), "Pending"),
    ],
)
def test_outcome_reads_the_final_conditions(wl: Workload, expected: str) -> None:
    assert outcome(wl) == expected


def test_flavors_group_resources_under_each_flavor_sorted() -> None:
    wl = workload(
        flavors=({"nvidia.com/gpu": "a100", "cpu": "default"}, {"cpu": "default", "memory": "m"})
    )

    assert flavors_of(wl.admission) == "a100[nvidia.com/gpu] default[cpu] m[memory]"
    assert flavors_of(None) == "-"


def test_flavors_name_the_one_flavor_that_serves_everything() -> None:
    wl = workload(flavors=({"cpu": "default", "memory": "default"},))

    assert flavors_of(wl.admission) == "default"


@pytest.mark.parametrize(
    ("value", "text"), [(30.0, "30"), (2.5, "2.5"), (0.125, "0.125"), (1 / 3, "0.333")]
)
def test_seconds_drop_needless_fractions(value: float, text: str) -> None:
    assert seconds(value) == text


def test_columns_are_aligned_without_trailing_blanks() -> None:
    assert aligned([("A", "BB", "C"), ("long", "x", "")]) == "A     BB  C\nlong  x"


@pytest.mark.parametrize("reason", ["AdmissionCheck", "DeactivatedDueToAdmissionCheck"])
def test_deactivated_by_an_admission_check_is_rejected(reason: str) -> None:
    evicted = Condition(type="Evicted", status="True", reason=reason)
    wl = Workload(meta=ObjectMeta(name="w", namespace="ns"), active=False, conditions=(evicted,))

    assert outcome(wl) == "Rejected"
