"""What an eviction leaves said on a Workload once its pods are gone, in Kueue's words: the
rules the watcher's Kubernetes statuses and the gateway's `muster describe` both apply."""

from __future__ import annotations

from muster.core.conditions import deactivated, pods_gone


def test_a_preempted_workload_is_requeued_at_once_and_its_reservation_cleared() -> None:
    said = pods_gone("Preempted", "Preempted to accommodate a workload", granular=True)

    assert said == [
        ("QuotaReserved", False, "PendingEvaluation", "Preempted to accommodate a workload"),
        ("Admitted", False, "NoReservation", "The workload has no reservation"),
        ("Requeued", True, "Preempted", "Preempted to accommodate a workload"),
    ]


def test_a_timed_out_workload_waits_and_the_classic_reasons_name_its_pending_checks() -> None:
    said = pods_gone("PodsReadyTimeout", "Exceeded", granular=False, checks_pending=True)

    assert said[0] == ("QuotaReserved", False, "Pending", "Exceeded")
    assert said[1][:3] == ("Admitted", False, "NoReservationUnsatisfiedChecks")
    assert said[2] == ("Requeued", False, "PodsReadyTimeout", "Exceeded")


def test_a_deactivated_workload_says_so_in_its_reservation_and_stays_unqueued() -> None:
    reason = "DeactivatedDueToRequeuingLimitExceeded"

    granular = deactivated(reason, "limit", granular=True)
    classic = deactivated(reason, "limit", granular=False)

    assert granular[0] == ("QuotaReserved", False, "Deactivated", "The workload is deactivated")
    assert classic[0] == ("QuotaReserved", False, "Pending", "limit")
    assert granular[2] == classic[2] == ("Requeued", False, reason, "limit")
