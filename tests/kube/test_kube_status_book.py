"""The Kueue statuses the watcher writes on Kubernetes (`muster.watcher.kueue_status`), from
muster's events as admission and the watcher publish them: what `kubectl get workloads`,
`kubectl describe workload` and `kubectl get clusterqueue,localqueue` show."""

from __future__ import annotations

import json
from typing import Any

import pytest

from muster.api.check_states import ChecksWanted
from muster.api.model import RequeuingStrategy
from muster.bus import new_event
from muster.cluster.kube import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.kueue_status.book import StatusBook

WL = ObjectRef(kind="Workload", namespace="ml", name="train")
LQ = ObjectRef(kind="LocalQueue", namespace="ml", name="lq")
CQ = ObjectRef(kind="ClusterQueue", name="cq")


def event(field: str, payload: Any, *, workload: str = "ml/train") -> pb.Envelope:
    return new_event(field, payload, cluster="local", workload=workload, source="test")


def config(kind: str, name: str, spec: dict[str, Any] | None = None) -> pb.Envelope:
    manifest = json.dumps({"kind": kind, "spec": spec or {}})
    payload = pb.ConfigApplied(kind=kind, name=name, manifest_json=manifest)
    return new_event("config_applied", payload, cluster="local", source="test")


def admission(cpu: str = "3", count: int = 3) -> pb.Admission:
    assignment = pb.PodSetAssignment(
        name="main", flavors={"cpu": "default"}, count=count, resource_usage={"cpu": cpu}
    )
    return pb.Admission(cluster_queue="cq", pod_set_assignments=[assignment])


def book(*events: pb.Envelope, version: str = "v1beta1", pods_ready: bool = False) -> StatusBook:
    made = StatusBook(kueue_version=version, pods_ready=pods_ready)
    for env in (
        config("ClusterQueue", "cq"),
        config("LocalQueue", "ml/lq", {"clusterQueue": "cq"}),
        event("submitted", pb.WorkloadSubmitted(queue_name="lq")),
        *events,
    ):
        made.apply(env)
    return made


def conditions(made: StatusBook) -> dict[str, tuple[str, str, str]]:
    status = made.status_of(WL) or {}
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_a_pending_workload_says_why_it_is_not_admitted() -> None:
    made = book(
        event(
            "pending",
            pb.WorkloadPending(reason="Inadmissible", message="LocalQueue lq doesn't exist"),
        )
    )
    # Kueue's UnadmittedWorkloadsObservability (on by default): Admitted False beside it.
    assert conditions(made) == {
        "QuotaReserved": ("False", "Inadmissible", "LocalQueue lq doesn't exist"),
        "Admitted": ("False", "NoReservation", "The workload has no reservation"),
    }
    assert "admission" not in (made.status_of(WL) or {})


def test_a_pending_workload_never_admitted_has_no_admitted_condition_with_classic_reasons() -> None:
    made = StatusBook(granular=False)
    for env in (
        event("submitted", pb.WorkloadSubmitted(queue_name="lq")),
        event("pending", pb.WorkloadPending(reason="Pending", message="insufficient quota")),
    ):
        made.apply(env)
    assert conditions(made) == {"QuotaReserved": ("False", "Pending", "insufficient quota")}


@pytest.mark.parametrize(("granular", "admitted"), [(True, ("False", "UnsatisfiedAdmissionChecks",
    "The workload has not all checks ready")), (False, None)])  # fmt: skip
def test_a_workload_holding_quota_with_checks_pending_is_not_admitted_yet(
    granular: bool, admitted: tuple[str, str, str] | None
) -> None:
    made = StatusBook(granular=granular)
    reserved = pb.QuotaReserved(admission=admission(), admission_checks=["budget"])
    for env in (
        event("submitted", pb.WorkloadSubmitted(queue_name="lq")),
        event("pending", pb.WorkloadPending(reason="Pending", message="insufficient quota")),
        event("quota_reserved", reserved),
    ):
        made.apply(env)
    assert conditions(made)["QuotaReserved"][0] == "True"
    assert conditions(made).get("Admitted") == admitted
    made.apply(event("admitted", pb.WorkloadAdmitted(admission=admission())))
    assert conditions(made)["Admitted"] == ("True", "Admitted", "The workload is admitted")


def test_an_admitted_workload_has_its_admission_and_both_conditions() -> None:
    made = book(
        event("quota_reserved", pb.QuotaReserved(admission=admission())),
        event("admitted", pb.WorkloadAdmitted(admission=admission())),
    )
    assert conditions(made) == {
        "QuotaReserved": ("True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        "Admitted": ("True", "Admitted", "The workload is admitted"),
    }
    assert (made.status_of(WL) or {})["admission"] == {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "3"},
             "count": 3}
        ],
    }  # fmt: skip


def test_an_admission_stored_before_its_reservation_stays_admitted() -> None:
    admitted = event("admitted", pb.WorkloadAdmitted(admission=admission()))
    made = book(admitted, event("quota_reserved", pb.QuotaReserved(admission=admission())))
    assert conditions(made)["Admitted"][0] == "True"
    status = made.status_of(LQ) or {}
    assert (status["reservingWorkloads"], status["admittedWorkloads"]) == (1, 1)


def test_a_preempted_workload_is_requeued_once_its_pods_are_gone_then_admitted_again() -> None:
    evicted = pb.WorkloadEvicted(reason="Preempted", message="to admit ml/urgent")
    made = book(
        event("admitted", pb.WorkloadAdmitted(admission=admission())),
        event("evicted", evicted),
    )
    # Kueue: Evicted at once; the reservation stays until the job's pods are gone.
    assert conditions(made)["Evicted"] == ("True", "Preempted", "to admit ml/urgent")
    assert conditions(made)["Admitted"][:2] == ("True", "Admitted")
    assert "Requeued" not in conditions(made)
    made.apply(event("eviction_completed", pb.EvictionCompleted()))
    assert conditions(made)["Requeued"] == ("True", "Preempted", "to admit ml/urgent")
    assert conditions(made)["QuotaReserved"] == (
        "False",
        "PendingEvaluation",
        "to admit ml/urgent",
    )
    assert conditions(made)["Admitted"] == (
        "False",
        "NoReservation",
        "The workload has no reservation",
    )
    assert "admission" not in (made.status_of(WL) or {})
    made.apply(event("requeued", pb.WorkloadRequeued(reason="Evicted", message="requeued")))
    assert conditions(made)["Requeued"][:2] == ("True", "Preempted")
    assert conditions(made)["QuotaReserved"][:2] == ("False", "PendingEvaluation")
    made.apply(event("admitted", pb.WorkloadAdmitted(admission=admission())))
    assert conditions(made)["Evicted"] == (
        "False",
        "QuotaReserved",
        "Previously: to admit ml/urgent",
    )
    assert conditions(made)["Admitted"][0] == "True"


TIMEOUT = "Exceeded the PodsReady timeout ml/train"


def timed_out(*, granular: bool = True) -> StatusBook:
    """ml/train admitted, evicted at the PodsReady timeout, its pods gone."""
    made = StatusBook(pods_ready=True, granular=granular)
    for env in (
        event("submitted", pb.WorkloadSubmitted(queue_name="lq")),
        event("admitted", pb.WorkloadAdmitted(admission=admission())),
        event("evicted", pb.WorkloadEvicted(reason="PodsReadyTimeout", message=TIMEOUT)),
        event("eviction_completed", pb.EvictionCompleted()),
    ):
        made.apply(env)
    return made


def test_a_pods_ready_timeout_waits_out_its_back_off_requeued_false_then_backoff_finished() -> None:
    made = timed_out()
    assert conditions(made)["Requeued"] == ("False", "PodsReadyTimeout", TIMEOUT)
    assert conditions(made)["Evicted"] == ("True", "PodsReadyTimeout", TIMEOUT)
    assert conditions(made)["QuotaReserved"] == ("False", "PendingEvaluation", TIMEOUT)
    assert conditions(made)["PodsReady"][:2] == ("False", "WaitForStart")
    made.apply(event("requeued", pb.WorkloadRequeued(reason="BackoffFinished", message="x")))
    assert conditions(made)["Requeued"] == (
        "True",
        "BackoffFinished",
        "The workload backoff was finished",
    )


def test_the_back_off_limit_deactivates_with_kueues_reason_and_cause() -> None:
    made = timed_out(granular=False)
    limit = "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    made.apply(event("evicted", pb.WorkloadEvicted(reason="InactiveWorkload", message=limit)))
    reason = "DeactivatedDueToRequeuingLimitExceeded"
    assert conditions(made)["Evicted"] == ("True", reason, limit)
    assert conditions(made)["Requeued"] == ("False", reason, limit)
    assert conditions(made)["QuotaReserved"] == ("False", "Pending", limit)  # classic reasons
    assert conditions(made)["Admitted"][:2] == ("False", "NoReservation")
    made.apply(event("requeued", pb.WorkloadRequeued(reason="Reactivated", message="x")))
    assert conditions(made)["Requeued"] == ("True", "Reactivated", "The workload was reactivated")


def at(field: str, payload: Any, at_s: float) -> pb.Envelope:
    env = event(field, payload)
    env.time_unix_nano = int(at_s * 1e9)
    return env


def test_requeue_state_counts_timeouts_tells_each_back_off_and_clears_on_deactivation() -> None:
    """Kueue's status.requeueState through backoffBaseSeconds 10, backoffMaxSeconds 15: the
    count at each PodsReady timeout, requeueAt base*2^(n-1) (capped) after the eviction, in
    whole seconds (metav1.Time, rounded down as admission waits), written with the eviction
    and kept while its pods stop, cleared when requeued; all of it on deactivation."""
    made = StatusBook(
        pods_ready=True,
        requeuing=RequeuingStrategy(backoff_base_seconds=10, backoff_max_seconds=15),
    )
    timeout = pb.WorkloadEvicted(reason="PodsReadyTimeout", message=TIMEOUT)
    made.apply(at("submitted", pb.WorkloadSubmitted(queue_name="lq"), 0.0))
    for n, (evicted_s, requeue_at) in enumerate(
        [(98.6, "1970-01-01T00:01:48Z"), (199.25, "1970-01-01T00:03:34Z")], start=1
    ):
        made.apply(at("admitted", pb.WorkloadAdmitted(admission=admission()), evicted_s - 10))
        made.apply(at("evicted", timeout, evicted_s))
        assert requeue_state(made) == {"count": n, "requeueAt": requeue_at}
        made.apply(at("eviction_completed", pb.EvictionCompleted(), evicted_s + 30))
        assert requeue_state(made) == {"count": n, "requeueAt": requeue_at}  # not from the stop
        requeued = pb.WorkloadRequeued(reason="BackoffFinished", message="x")
        made.apply(at("requeued", requeued, evicted_s + 30))
        assert requeue_state(made) == {"count": n, "requeueAt": None}  # None: removed
    made.apply(at("admitted", pb.WorkloadAdmitted(admission=admission()), 300.0))
    limit = "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    reason = "DeactivatedDueToRequeuingLimitExceeded"
    made.apply(at("evicted", pb.WorkloadEvicted(reason=reason, message=limit), 301.0))
    assert requeue_state(made) is None  # at once, while its pods stop
    made.apply(at("eviction_completed", pb.EvictionCompleted(), 302.0))
    assert requeue_state(made) is None


def test_a_check_retry_writes_requeue_at_from_its_last_transition_only_ever_later() -> None:
    """Kueue's workload controller: a check in Retry with requeueAfterSeconds sets requeueAt
    to its lastTransitionTime + requeueAfterSeconds (whole seconds), with no count, and only
    if that is later than the requeueAt set (SetRequeueState). Removed once it queues again."""
    made = StatusBook(pods_ready=True)
    made.apply(at("submitted", pb.WorkloadSubmitted(queue_name="lq"), 0.0))
    reserved = pb.QuotaReserved(admission=admission(), admission_checks=["prov"])
    made.apply(at("quota_reserved", reserved, 10.0))
    # Entered Retry at 12 s (lastTransitionTime), told at 13.2 s: 12 + 30, not 13.2 + 30.
    retry = pb.AdmissionCheckUpdated(
        check="prov", state="Retry", requeue_after_seconds=30, transitioned_unix_nano=12 * 10**9
    )
    made.apply(at("admission_check", retry, 13.2))
    assert requeue_state(made) is None  # written with the eviction the Retry causes
    why = 'Evicted due to AdmissionCheck in Retry state: "prov"'
    evicted = pb.WorkloadEvicted(reason="AdmissionCheck", message=why)
    made.apply(at("evicted", evicted, 13.4))
    assert requeue_state(made) == {"requeueAt": "1970-01-01T00:00:42Z"}
    sooner = pb.AdmissionCheckUpdated(check="prov", state="Retry", requeue_after_seconds=5)
    made.apply(at("admission_check", sooner, 14.0))  # ends at 19: never pulls requeueAt in
    assert requeue_state(made) == {"requeueAt": "1970-01-01T00:00:42Z"}
    longer = pb.AdmissionCheckUpdated(check="prov", state="Retry", requeue_after_seconds=90)
    made.apply(at("admission_check", longer, 14.0))  # its pods still stopping: 104 stands
    assert requeue_state(made) == {"requeueAt": "1970-01-01T00:01:44Z"}
    requeued = pb.WorkloadRequeued(reason="Evicted", message="requeued")
    made.apply(at("requeued", requeued, 104.0))
    assert requeue_state(made) is None


def test_a_check_retry_told_after_the_pods_are_gone_moves_requeue_at_later() -> None:
    """Kueue's NeedsRequeueAtUpdate: while the workload waits out its Retry's end, its pods
    gone, a later Retry moves requeueAt later still (admission waits for it too). Before, the
    watcher ignored it once the pods were gone."""
    made = StatusBook(pods_ready=True)
    made.apply(at("submitted", pb.WorkloadSubmitted(queue_name="lq"), 0.0))
    reserved = pb.QuotaReserved(admission=admission(), admission_checks=["prov"])
    made.apply(at("quota_reserved", reserved, 10.0))
    retry = pb.AdmissionCheckUpdated(check="prov", state="Retry", requeue_after_seconds=30)
    made.apply(at("admission_check", retry, 12.0))
    why = 'Evicted due to AdmissionCheck in Retry state: "prov"'
    made.apply(at("evicted", pb.WorkloadEvicted(reason="AdmissionCheck", message=why), 12.5))
    made.apply(at("eviction_completed", pb.EvictionCompleted(), 15.0))
    assert requeue_state(made) == {"requeueAt": "1970-01-01T00:00:42Z"}
    again = pb.AdmissionCheckUpdated(check="prov", state="Retry", requeue_after_seconds=60)
    made.apply(at("admission_check", again, 20.0))
    assert requeue_state(made) == {"requeueAt": "1970-01-01T00:01:20Z"}
    requeued = pb.WorkloadRequeued(reason="BackoffFinished", message="Requeued after back-off")
    made.apply(at("requeued", requeued, 80.0))
    assert requeue_state(made) is None


def test_a_check_retry_told_while_queued_for_quota_writes_requeue_at() -> None:
    """Kueue's NeedsRequeueAtUpdate runs for any unfinished workload: a Retry told once it is
    queued again, waiting for quota, writes requeueAt (from the check's lastTransitionTime)
    and admission holds it out until then; its `requeued` at that end removes it. Before,
    the watcher ignored it."""
    made = StatusBook(pods_ready=True)
    made.apply(at("submitted", pb.WorkloadSubmitted(queue_name="lq"), 0.0))
    retry = pb.AdmissionCheckUpdated(check="prov", state="Retry", requeue_after_seconds=30)
    made.apply(at("admission_check", retry, 5.0))
    assert requeue_state(made) == {"requeueAt": "1970-01-01T00:00:35Z"}
    shorter = pb.AdmissionCheckUpdated(check="prov", state="Retry", requeue_after_seconds=10)
    made.apply(at("admission_check", shorter, 6.0))  # never earlier
    assert requeue_state(made) == {"requeueAt": "1970-01-01T00:00:35Z"}
    requeued = pb.WorkloadRequeued(reason="BackoffFinished", message="Requeued after back-off")
    made.apply(at("requeued", requeued, 35.0))
    assert requeue_state(made) is None


def requeue_state(made: StatusBook) -> dict[str, Any] | None:
    return (made.status_of(WL) or {}).get("requeueState")


def test_an_admission_check_retry_is_requeued_after_its_back_off() -> None:
    reserved = pb.QuotaReserved(admission=admission(), admission_checks=["prov"])
    why = 'Evicted due to AdmissionCheck in Retry state: "prov"'
    made = book(
        event("quota_reserved", reserved),
        event("evicted", pb.WorkloadEvicted(reason="AdmissionCheck", message=why)),
    )
    # Nothing ran: admission requeues it without waiting for pods to stop.
    made.apply(event("requeued", pb.WorkloadRequeued(reason="Evicted", message="requeued")))
    assert conditions(made)["Requeued"] == (
        "True",
        "BackoffFinished",
        "The workload backoff was finished",
    )
    assert conditions(made)["Admitted"][:2] == ("False", "NoReservation")


def test_with_classic_reasons_a_workload_with_checks_evicted_says_checks_are_not_ready() -> None:
    made = StatusBook(granular=False)
    reserved = pb.QuotaReserved(admission=admission(), admission_checks=["prov"])
    for env in (
        event("submitted", pb.WorkloadSubmitted(queue_name="lq")),
        event("quota_reserved", reserved),
        event("admitted", pb.WorkloadAdmitted(admission=admission())),
        event("evicted", pb.WorkloadEvicted(reason="Preempted", message="to admit ml/urgent")),
        event("eviction_completed", pb.EvictionCompleted()),
    ):
        made.apply(env)
    assert conditions(made)["Admitted"] == (
        "False",
        "NoReservationUnsatisfiedChecks",
        "The workload has no reservation and not all checks ready",
    )
    assert conditions(made)["QuotaReserved"] == ("False", "Pending", "to admit ml/urgent")


def test_a_stopped_cluster_queue_leaves_its_evicted_workloads_unrequeued_until_it_runs() -> None:
    made = book(
        event("admitted", pb.WorkloadAdmitted(admission=admission())),
        event(
            "evicted",
            pb.WorkloadEvicted(reason="ClusterQueueStopped", message="The ClusterQueue is stopped"),
        ),
        event("eviction_completed", pb.EvictionCompleted()),
        event("requeued", pb.WorkloadRequeued(reason="Evicted", message="requeued")),
        event(
            "pending", pb.WorkloadPending(reason="Suspended", message="ClusterQueue cq is stopped")
        ),
    )
    assert conditions(made)["Requeued"][:2] == ("False", "ClusterQueueStopped")
    made.apply(event("pending", pb.WorkloadPending(reason="WaitingForQuota", message="no room")))
    assert conditions(made)["Requeued"] == (
        "True",
        "ClusterQueueRestarted",
        "The ClusterQueue was restarted after being stopped",
    )


@pytest.mark.parametrize(
    ("succeeded", "told", "reason"),
    [
        (True, "", "Succeeded"),
        (False, "", "Failed"),
        (False, "FailedToStart", "FailedToStart"),  # the binder's, as Kueue's job framework
        (False, "Not A Reason", "Failed"),  # hostile: the API server would refuse the status
    ],
)
def test_a_finished_workload_keeps_its_admission(succeeded: bool, told: str, reason: str) -> None:
    made = book(
        event("admitted", pb.WorkloadAdmitted(admission=admission())),
        event("finished", pb.WorkloadFinished(succeeded=succeeded, message="done", reason=told)),
    )
    assert conditions(made)["Finished"] == ("True", reason, "done")
    assert (made.status_of(WL) or {})["admission"]["clusterQueue"] == "cq"


def test_local_queue_counts_and_sums_its_live_workloads() -> None:
    made = book(
        event("submitted", pb.WorkloadSubmitted(queue_name="lq"), workload="ml/b"),
        event("submitted", pb.WorkloadSubmitted(queue_name="lq"), workload="ml/c"),
        event("admitted", pb.WorkloadAdmitted(admission=admission("3"))),
        event("quota_reserved", pb.QuotaReserved(admission=admission("1500m")), workload="ml/b"),
    )
    status = made.status_of(LQ) or {}
    assert (
        status["pendingWorkloads"],
        status["reservingWorkloads"],
        status["admittedWorkloads"],
    ) == (1, 2, 1)
    assert status["flavorsReservation"] == [
        {"name": "default", "resources": [{"name": "cpu", "total": "4500m"}]}
    ]
    assert status["flavorUsage"] == [
        {"name": "default", "resources": [{"name": "cpu", "total": "3"}]}
    ]
    assert status["conditions"][0]["status"] == "True"

    made.apply(event("finished", pb.WorkloadFinished(succeeded=True)))
    made.apply(event("deleted", pb.WorkloadDeleted(), workload="ml/c"))
    status = made.status_of(LQ) or {}
    assert (status["pendingWorkloads"], status["admittedWorkloads"]) == (0, 0)
    assert status["flavorUsage"] == []


def test_v1beta2_names_the_local_queue_usage_flavors_usage() -> None:
    status = book(version="v1beta2").status_of(LQ) or {}
    assert "flavorsUsage" in status
    assert "flavorUsage" not in status


def test_a_local_queue_whose_cluster_queue_is_missing_is_inactive() -> None:
    made = StatusBook()
    assert made.apply(config("LocalQueue", "ml/lq", {"clusterQueue": "cq"})) == {LQ}
    (active,) = (made.status_of(LQ) or {})["conditions"]
    assert (active["status"], active["reason"]) == ("False", "ClusterQueueDoesNotExist")
    assert made.apply(config("ClusterQueue", "cq")) == {LQ}
    assert (made.status_of(LQ) or {})["conditions"][0]["status"] == "True"


def test_cluster_queue_status_is_admissions_with_usage_borrowing_over_nominal() -> None:
    resource = pb.ResourceStatus(
        name="cpu", nominal="4", reserved="6", used="5", borrowed="2", available="0"
    )
    status = pb.ClusterQueueStatus(
        name="cq",
        pending_workloads=2,
        reserving_workloads=3,
        admitted_workloads=2,
        flavors=[pb.FlavorStatus(name="default", resources=[resource])],
        active=True,
    )
    made = StatusBook()
    assert made.apply(new_event("queue_status", pb.QueueStatusChanged(cluster_queue=status),
                                cluster="local", source="test")) == {CQ}  # fmt: skip
    cq = made.status_of(CQ) or {}
    assert (cq["pendingWorkloads"], cq["reservingWorkloads"], cq["admittedWorkloads"]) == (2, 3, 2)
    assert cq["flavorsReservation"] == [
        {"name": "default", "resources": [{"name": "cpu", "total": "6", "borrowed": "2"}]}
    ]
    assert cq["flavorsUsage"] == [
        {"name": "default", "resources": [{"name": "cpu", "total": "5", "borrowed": "1"}]}
    ]
    assert cq["conditions"][0]["reason"] == "Ready"


def test_events_of_gangs_outside_kueue_and_unknown_workloads_write_nothing() -> None:
    made = book()
    finished = pb.WorkloadFinished(succeeded=True)
    assert made.apply(event("finished", finished, workload="ml/train-gang/workers")) == set()
    assert made.apply(event("finished", finished, workload="ml/never-submitted")) == set()
    assert list(made.refs()) == [WL, CQ, LQ]


def test_a_reservation_with_checks_wants_them_and_an_eviction_resets_them() -> None:
    reserved = pb.QuotaReserved(admission=admission(), admission_checks=["prov", "budget"])
    made = book(event("quota_reserved", reserved))
    assert made.checks_of(WL) == ChecksWanted(names=("budget", "prov"))
    evicted = event("evicted", pb.WorkloadEvicted(reason="AdmissionCheck", message="retry"))
    made.apply(evicted)
    wanted = made.checks_of(WL)
    assert wanted is not None
    assert wanted.evicted_at_s == evicted.time_unix_nano / 1e9
    # Requeued to a ClusterQueue without checks: the list is emptied, not left alone.
    made.apply(event("requeued", pb.WorkloadRequeued(reason="Evicted", message="requeued")))
    made.apply(event("quota_reserved", pb.QuotaReserved(admission=admission())))
    assert made.checks_of(WL) == ChecksWanted(names=(), evicted_at_s=wanted.evicted_at_s)


def test_a_workload_whose_reservations_never_had_checks_leaves_the_list_alone() -> None:
    made = book(event("quota_reserved", pb.QuotaReserved(admission=admission())))
    assert made.checks_of(WL) is None
    assert made.checks_of(LQ) is None


def test_a_deactivated_workload_gives_its_quota_back_and_is_not_requeued() -> None:
    reserved = pb.QuotaReserved(admission=admission(), admission_checks=["prov"])
    rejected = pb.WorkloadEvicted(reason="InactiveWorkload", message="prov was rejected")
    made = book(event("quota_reserved", reserved), event("evicted", rejected))
    reason = "DeactivatedDueToAdmissionCheck"  # Kueue's, with the deactivation's cause
    assert conditions(made)["Evicted"] == ("True", reason, "prov was rejected")
    assert conditions(made)["QuotaReserved"] == (
        "False",
        "Deactivated",
        "The workload is deactivated",
    )
    assert conditions(made)["Requeued"] == ("False", reason, "prov was rejected")
    assert "admission" not in (made.status_of(WL) or {})
    lq = made.status_of(LQ) or {}
    assert (lq["pendingWorkloads"], lq["reservingWorkloads"]) == (0, 0)


def test_a_pending_workload_deactivated_reads_evicted_and_deactivated_as_kueue_writes_it() -> None:
    made = book(event("pending", pb.WorkloadPending(reason="WaitingForQuota", message="full")))
    made.apply(event("active_changed", pb.WorkloadActiveChanged(active=False)))
    deactivated = ("Deactivated", "The workload is deactivated")
    assert conditions(made)["Evicted"] == ("True", *deactivated)
    assert conditions(made)["QuotaReserved"] == ("False", *deactivated)
    assert (made.status_of(LQ) or {})["pendingWorkloads"] == 0
    # Reactivated: it never held quota, so no Requeued condition (Kueue sets none either).
    made.apply(event("requeued", pb.WorkloadRequeued(reason="Reactivated")))
    assert "Requeued" not in conditions(made)
    assert (made.status_of(LQ) or {})["pendingWorkloads"] == 1


WAITING = ("False", "WaitForStart", "Not all pods are ready or succeeded")
STARTED = ("True", "Started", "All pods reached readiness and the workload is running")


def pods_ready_of(made: StatusBook) -> tuple[str, str, str] | None:
    return conditions(made).get("PodsReady")


def test_with_wait_for_pods_ready_a_workload_waits_for_start_until_its_pods_are_ready() -> None:
    admitted = event("admitted", pb.WorkloadAdmitted(admission=admission()))
    made = book(pods_ready=True)
    assert pods_ready_of(made) == WAITING  # from the start, as Kueue's job reconciler writes it
    made.apply(admitted)
    assert pods_ready_of(made) == WAITING
    assert made.apply(event("running", pb.WorkloadRunning(pods_ready=False))) == set()
    assert pods_ready_of(made) == WAITING
    assert made.apply(event("pods_ready", pb.PodsReady())) == {WL}
    assert pods_ready_of(made) == STARTED
    assert [c["type"] for c in (made.status_of(WL) or {})["conditions"]] == [
        "QuotaReserved",
        "Admitted",
        "PodsReady",
    ]
    made.apply(event("finished", pb.WorkloadFinished(succeeded=True)))
    assert pods_ready_of(made) == STARTED  # a finished job's readiness is left as it was


def test_a_running_with_its_pods_ready_is_pods_ready_and_an_eviction_waits_anew() -> None:
    made = book(
        event("admitted", pb.WorkloadAdmitted(admission=admission())),
        event("running", pb.WorkloadRunning(pods_ready=True)),
        pods_ready=True,
    )
    assert pods_ready_of(made) == STARTED
    made.apply(event("evicted", pb.WorkloadEvicted(reason="Preempted", message="preempted")))
    assert pods_ready_of(made) == WAITING
    made.apply(event("requeued", pb.WorkloadRequeued(message="requeued")))
    made.apply(event("admitted", pb.WorkloadAdmitted(admission=admission())))
    assert pods_ready_of(made) == WAITING  # new pods: not ready until they say so


def test_readiness_lost_waits_for_recovery_then_reads_recovered() -> None:
    made = book(
        event("admitted", pb.WorkloadAdmitted(admission=admission())),
        event("running", pb.WorkloadRunning(pods_ready=True)),
        pods_ready=True,
    )
    assert made.apply(event("pods_ready", pb.PodsReady(lost=True))) == {WL}
    assert pods_ready_of(made) == (
        "False",
        "WaitForRecovery",
        "At least one pod has failed, waiting for recovery",
    )
    assert made.apply(event("pods_ready", pb.PodsReady())) == {WL}
    assert pods_ready_of(made) == ("True", "Recovered", STARTED[2])
    made.apply(event("pods_ready", pb.PodsReady(lost=True)))
    made.apply(event("pods_ready", pb.PodsReady()))
    assert pods_ready_of(made) == ("True", "Recovered", STARTED[2])  # Kueue keeps Recovered
    made.apply(event("evicted", pb.WorkloadEvicted(reason="PodsReadyTimeout", message="x")))
    assert pods_ready_of(made) == WAITING


def test_readiness_lost_before_it_was_ready_still_waits_for_start() -> None:
    made = book(
        event("admitted", pb.WorkloadAdmitted(admission=admission())),
        event("pods_ready", pb.PodsReady(lost=True)),
        pods_ready=True,
    )
    assert pods_ready_of(made) == WAITING


def test_pods_ready_of_a_workload_not_admitted_changes_nothing() -> None:
    made = book(event("pods_ready", pb.PodsReady()), pods_ready=True)
    assert pods_ready_of(made) == WAITING


def test_without_wait_for_pods_ready_no_pods_ready_condition_is_written() -> None:
    made = book(
        event("admitted", pb.WorkloadAdmitted(admission=admission())),
        event("running", pb.WorkloadRunning(pods_ready=True)),
    )
    assert pods_ready_of(made) is None
