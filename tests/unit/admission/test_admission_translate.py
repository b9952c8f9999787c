"""Envelopes to facts and engine events to envelopes: types, fields and deterministic ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from admission_stream import applied, cluster_queue, reported, submitted, workload
from nats_subjects import subject_matches

from muster.admission.admission_proto import (
    admission_from_proto,
    admission_to_proto,
    placement_hints,
)
from muster.admission.decisions import Decision, Manifests, decisions_from, envelopes_of
from muster.admission.fact_reader import fact_of
from muster.admission.facts import (
    ApplyConfig,
    CheckUpdated,
    DeleteConfig,
    FactError,
    Finish,
    GangRejected,
    Recorded,
    Stopped,
    Submit,
)
from muster.admission.routing import WorkloadRoute
from muster.admission.subjects import (
    CONFIG_SUBJECTS,
    consumer_subjects,
    replay_subjects,
    unread_reports,
)
from muster.api.model import (
    Admission,
    ClusterQueue,
    KueueConfig,
    ObjectMeta,
    PodSetAssignment,
    ResourceFlavor,
    Toleration,
    WaitForPodsReadyConfig,
    WorkloadKey,
)
from muster.bus import EVENTS_STREAM, new_event
from muster.bus.subjects import EVENT_TYPES, event_subject, stream_of, subject_of
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import Event, EventType
from muster.payloads import MANIFEST_COPY_LIMIT

ADMISSION = Admission(
    cluster_queue="cq",
    pod_set_assignments=(
        PodSetAssignment(
            name="main",
            flavors={"cpu": "default", "memory": "default"},
            count=2,
            resource_usage={"cpu": 1500, "memory": 2 * 1024**3 * 1000},
        ),
    ),
)


class Context:
    """A DecisionContext over fixed answers."""

    def __init__(
        self,
        flavors: Mapping[str, ResourceFlavor] | None = None,
        routes: Mapping[str, WorkloadRoute] | None = None,
    ) -> None:
        self._flavors = flavors or {}
        self.routes = routes or {}
        self.manifests: dict[str, str] = {}

    def admission_of(self, key: WorkloadKey) -> Admission | None:
        return ADMISSION

    checks: tuple[str, ...] = ("prov",)

    def checks_of(self, key: WorkloadKey) -> Sequence[str]:
        return self.checks

    def has_checks(self, key: WorkloadKey) -> bool:
        return bool(self.checks)

    def cluster_queue_of(self, key: WorkloadKey) -> str:
        return "cq"

    def cluster_of(self, key: WorkloadKey) -> str:
        return "east" if key == "ns/victim" else "local"

    def generation_of(self, key: WorkloadKey) -> int:
        return 3

    def submitted_id_of(self, key: WorkloadKey) -> str:
        return f"submitted-{key}"

    def manifests_of(self, key: WorkloadKey) -> Manifests:
        return Manifests(workload_json=self.manifests.get(key, ""), origin_cluster="local")

    def route_of(self, key: WorkloadKey) -> WorkloadRoute | None:
        return self.routes.get(key)

    @property
    def flavors(self) -> Mapping[str, ResourceFlavor]:
        return self._flavors


def event(type_: EventType, obj: str, reason: str = "", message: str = "", by: str = "") -> Event:
    return Event(time=5.0, type=type_, object=obj, reason=reason, message=message, by=by)


# --- envelope -> fact -------------------------------------------------------------------------


def test_submitted_becomes_a_submit_with_cluster_generation_and_time() -> None:
    fact = fact_of(submitted(workload("a", cpu="500m"), at_s=7.0, cluster="east"))
    assert isinstance(fact, Submit)
    assert fact.workload.key == "ns/a"
    assert fact.workload.pod_sets[0].requests == {"cpu": 500}
    assert (fact.cluster, fact.generation, fact.at_s) == ("east", 1, 7.0)
    assert fact.event_id  # what the decisions about it name


def test_the_envelopes_queue_name_wins_over_the_manifests() -> None:
    env = submitted(workload("a", queue="lq"))
    env.submitted.queue_name = "picked"
    fact = fact_of(env)
    assert isinstance(fact, Submit)
    assert fact.workload.queue_name == "picked"


@pytest.mark.parametrize(
    ("field", "payload", "expected"),
    [
        ("finished", None, Finish(WorkloadKey("ns/a"), at_s=1.0)),  # when its quota was freed
        ("eviction_completed", None, Stopped(WorkloadKey("ns/a"), at_s=1.0)),
        # Gang-permit's eviction of pods outside Kueue (one part of three) holds no quota.
        ("eviction_completed", pb.EvictionCompleted(pods=300, part=0, parts=3), None),
        (
            "admission_check",
            pb.AdmissionCheckUpdated(check="prov", state="Ready", message="ok"),
            CheckUpdated(WorkloadKey("ns/a"), check="prov", state="Ready", message="ok", at_s=1.0),
        ),
        (  # a Retry counts from the entry's lastTransitionTime the watcher carries, not 1.0
            "admission_check",
            pb.AdmissionCheckUpdated(
                check="prov", state="Retry", requeue_after_seconds=30, transitioned_unix_nano=10**8
            ),
            CheckUpdated(
                WorkloadKey("ns/a"),
                check="prov",
                state="Retry",
                message="",
                requeue_after_s=30,
                at_s=0.1,
            ),
        ),
        (
            "gang_rejected",
            pb.GangRejected(reason="GangTimedOut", message="late"),
            GangRejected(WorkloadKey("ns/a"), reason="GangTimedOut", message="late"),
        ),
        ("running", None, None),
        ("bound", None, None),
    ],
)
def test_reported_facts(field: str, payload: object, expected: object) -> None:
    assert fact_of(reported(field, "ns/a", payload)) == expected


def test_config_events_become_apply_and_delete() -> None:
    fact = fact_of(applied(cluster_queue(cohort="team")))
    assert isinstance(fact, ApplyConfig)
    assert isinstance(fact.obj, ClusterQueue)
    assert fact.obj.cohort == "team"
    deleted = new_event(
        "config_deleted", pb.ConfigDeleted(kind="Cohort", name="team"), cluster="local", source="t"
    )
    assert fact_of(deleted) == DeleteConfig(kind="Cohort", name="team", cluster="local")


@pytest.mark.parametrize(
    "manifest_json",
    ["not json", '{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {}}'],
)
def test_an_unreadable_manifest_is_a_fact_error(manifest_json: str) -> None:
    env = submitted(workload("a"))
    env.submitted.manifest_json = manifest_json
    with pytest.raises(FactError):
        fact_of(env)


def test_published_decisions_read_back_as_recorded_facts() -> None:
    payload = pb.QuotaReserved(admission=admission_to_proto(ADMISSION), admission_checks=["prov"])
    env = new_event(
        "quota_reserved",
        payload,
        cluster="local",
        workload="ns/a",
        source="admission/1",
        now_ns=2_000_000_000,
    )
    env.submitted_id = "submitted-1"
    fact = fact_of(env)
    assert fact == Recorded(
        WorkloadKey("ns/a"), kind="quota_reserved", source="admission/1", at_s=2.0,
        event_id=env.event_id, submitted_id="submitted-1", admission=ADMISSION, checks=("prov",),
    )  # fmt: skip


def test_admission_quantities_round_trip_as_kubernetes_strings() -> None:
    proto = admission_to_proto(ADMISSION)
    assert dict(proto.pod_set_assignments[0].resource_usage) == {"cpu": "1500m", "memory": "2Gi"}
    assert admission_from_proto(proto) == ADMISSION


# --- engine events -> decisions ---------------------------------------------------------------


def fields(decisions: list[Decision]) -> list[tuple[str, str, int]]:
    return [(d.field, d.workload, d.n) for d in decisions]


def test_each_engine_event_maps_to_its_payload() -> None:
    decisions = decisions_from(
        [
            event(EventType.PENDING, "ns/p", "WaitingForQuota", "1 more needed"),
            event(EventType.QUOTA_RESERVED, "ns/a"),
            event(EventType.ADMITTED, "ns/a"),
            event(EventType.REQUEUED, "ns/r", "Evicted", "Requeued after eviction"),
            event(EventType.FINISHED, "ns/f"),
        ],
        Context(),
    )
    assert fields(decisions) == [
        ("pending", "ns/p", 0),
        ("quota_reserved", "ns/a", 0),
        ("admitted", "ns/a", 0),
        ("requeued", "ns/r", 0),
    ]
    pending, reserved, admitted, requeued = (d.payload for d in decisions)
    assert isinstance(pending, pb.WorkloadPending)
    assert (pending.reason, pending.message, pending.cluster_queue) == (
        "WaitingForQuota",
        "1 more needed",
        "cq",
    )
    assert isinstance(reserved, pb.QuotaReserved)
    assert list(reserved.admission_checks) == ["prov"]
    assert isinstance(admitted, pb.WorkloadAdmitted)
    assert admitted.admission.cluster_queue == "cq"
    assert isinstance(requeued, pb.WorkloadRequeued)
    assert requeued.reason == "Evicted"
    assert {(d.generation, d.time_s) for d in decisions} == {(3, 5.0)}


def test_victims_of_one_preemptor_are_one_request_plus_one_eviction_each() -> None:
    msg = "Preempted to accommodate a workload"
    decisions = decisions_from(
        [
            event(EventType.PREEMPTED, "ns/victim", "InClusterQueue", msg, by="ns/urgent"),
            event(EventType.EVICTED, "ns/victim", "Preempted", msg, by="ns/urgent"),
            event(EventType.PREEMPTED, "ns/other", "InClusterQueue", msg, by="ns/urgent"),
            event(EventType.EVICTED, "ns/other", "Preempted", msg, by="ns/urgent"),
        ],
        Context(),
    )
    assert fields(decisions) == [
        ("preemption_requested", "ns/urgent", 0),
        ("evicted", "ns/victim", 0),
        ("evicted", "ns/other", 0),
    ]
    request = decisions[0].payload
    assert isinstance(request, pb.PreemptionRequested)
    assert [(v.workload, v.cluster, v.reason) for v in request.victims] == [
        ("ns/victim", "east", "InClusterQueue"),
        ("ns/other", "local", "InClusterQueue"),
    ]
    assert decisions[1].cluster == "east"
    evicted = decisions[1].payload
    assert isinstance(evicted, pb.WorkloadEvicted)
    assert evicted.preemptor == "ns/urgent"


def test_an_eviction_that_deactivates_is_reported_once_as_inactive() -> None:
    decisions = decisions_from(
        [
            event(EventType.EVICTED, "ns/a", "AdmissionCheck", "rejected"),
            event(EventType.DEACTIVATED, "ns/a", "AdmissionCheck", "rejected"),
            event(EventType.DEACTIVATED, "ns/b", "RequeuingLimitExceeded", "too many"),
        ],
        Context(),
    )
    assert fields(decisions) == [("evicted", "ns/a", 0), ("evicted", "ns/b", 0)]
    assert [d.payload.reason for d in decisions] == ["InactiveWorkload", "InactiveWorkload"]  # type: ignore[attr-defined]


def test_repeated_events_of_one_workload_are_numbered() -> None:
    decisions = decisions_from(
        [event(EventType.PENDING, "ns/a", "x", "1"), event(EventType.PENDING, "ns/a", "x", "2")],
        Context(),
    )
    assert fields(decisions) == [("pending", "ns/a", 0), ("pending", "ns/a", 1)]


def test_placement_hints_are_the_assigned_flavors_labels_and_tolerations() -> None:
    gpu = ResourceFlavor(
        meta=ObjectMeta(name="default"),
        node_labels={"pool": "gpu"},
        tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),),
    )
    (hints,) = placement_hints(ADMISSION, {"default": gpu})
    assert (hints.name, dict(hints.node_selector)) == ("main", {"pool": "gpu"})
    assert [(t.key, t.operator, t.effect) for t in hints.tolerations] == [
        ("gpu", "Exists", "NoSchedule")
    ]
    (empty,) = placement_hints(ADMISSION, {})
    assert not empty.node_selector
    assert not empty.tolerations


def test_a_check_less_reservation_is_told_by_its_admitted_alone() -> None:
    ctx = Context()
    ctx.checks = ()
    reserved_then_admitted = [
        event(EventType.QUOTA_RESERVED, "ns/a"),
        event(EventType.ADMITTED, "ns/a"),
    ]
    (admitted,) = decisions_from(reserved_then_admitted, ctx)
    assert admitted.field == "admitted"
    assert isinstance(admitted.payload, pb.WorkloadAdmitted)
    assert admitted.payload.with_reservation
    # Reserved only (its admission comes in a later round): told as before.
    (reserved,) = decisions_from(reserved_then_admitted[:1], ctx)
    assert reserved.field == "quota_reserved"
    # An admission with checks: both, the admitted without the reservation.
    checked = decisions_from(reserved_then_admitted, Context())
    assert [d.field for d in checked] == ["quota_reserved", "admitted"]
    assert isinstance(checked[1].payload, pb.WorkloadAdmitted)
    assert not checked[1].payload.with_reservation
    # Admitted later, after its checks passed: no reservation to tell.
    (later,) = decisions_from(reserved_then_admitted[1:], ctx)
    assert isinstance(later.payload, pb.WorkloadAdmitted)
    assert not later.payload.with_reservation


def test_envelope_ids_are_deterministic_per_cause() -> None:
    cause = submitted(workload("a"))
    decisions = decisions_from(
        [event(EventType.QUOTA_RESERVED, "ns/a"), event(EventType.ADMITTED, "ns/a")], Context()
    )
    first = envelopes_of(decisions, cause=cause, source="admission/0")
    again = envelopes_of(decisions, cause=cause, source="admission/0")
    assert [e.event_id for e in first] == [e.event_id for e in again]
    assert len({e.event_id for e in first}) == 2
    other = envelopes_of(decisions, cause=submitted(workload("a")), source="admission/0")
    assert {e.event_id for e in other}.isdisjoint(e.event_id for e in first)
    reserved = first[0]
    assert (reserved.type, reserved.workload, reserved.cause, reserved.source) == (
        "workload.quota_reserved", "ns/a", cause.event_id, "admission/0"
    )  # fmt: skip
    assert (reserved.cluster, reserved.generation, reserved.time_unix_nano) == (
        "local",
        3,
        5_000_000_000,
    )
    assert {e.submitted_id for e in first} == {"submitted-ns/a"}


# Read by the rounds themselves (unwrapped, or a record naming nothing is not a fact).
_READ_ELSEWHERE = frozenset({"forwarded", "partition_changed"})


@pytest.mark.parametrize("field", sorted(EVENT_TYPES))
@pytest.mark.parametrize("stored", ["in a partition", "in none", "before partitions"])
def test_admission_reads_exactly_the_events_it_reads(field: str, stored: str) -> None:
    """What the consumer and the rebuild read: what admission reads, in a partition, in none
    or stored before partitions (every replica reads those); nothing else, so that no replica
    receives the pods' reports it would drop. A forward always names its partition."""
    partition = "3" if stored == "in a partition" else ""
    event_type = EVENT_TYPES[field]
    env = pb.Envelope(type=event_type, cluster="local", workload="ns/w", partition=partition)
    getattr(env, field).SetInParent()
    if field == "running":
        env.running.pods_ready = True  # ready as they started: a PodsReady
    try:
        reads = fact_of(env) is not None or field in _READ_ELSEWHERE
    except FactError:  # an empty manifest: read, and found wanting
        reads = True
    owned = (3, 5)  # some partitions: deciding every one reads `*`, which `_` matches too
    filters = {*consumer_subjects(owned), *replay_subjects(owned), *CONFIG_SUBJECTS}
    subject = event_subject("local", event_type) if stored == "before partitions" else None
    consumed = any(subject_matches(p, subject or subject_of(env)) for p in filters)
    expected = reads and stream_of(event_type) == EVENTS_STREAM
    if stored != "in a partition" and field == "forwarded":
        expected = False
    assert consumed == expected


def test_a_replica_reads_only_its_partitions_reports() -> None:
    own = consumer_subjects([2, 5])
    of = [pb.Envelope(type="workload.finished", cluster="c", partition=p) for p in ("2", "3")]
    for env in of:
        env.finished.SetInParent()
    assert [any(subject_matches(f, subject_of(e)) for f in own) for e in of] == [True, False]


@pytest.mark.parametrize("waits", [False, True], ids=["waitForPodsReady-off", "on"])
@pytest.mark.parametrize("partition", ["2", ""], ids=["in-its-partition", "before-partitions"])
@pytest.mark.parametrize("field", ["pods_ready", "running"])
def test_a_replica_reads_pods_ready_only_while_it_waits_for_pods(
    waits: bool, partition: str, field: str
) -> None:
    kueue = KueueConfig(wait_for_pods_ready=WaitForPodsReadyConfig(enable=waits))
    unread = unread_reports(kueue)
    env = pb.Envelope(type=EVENT_TYPES[field], cluster="c", workload="ns/w", partition=partition)
    getattr(env, field).SetInParent()
    for filters in (consumer_subjects([2], unread=unread), replay_subjects([2], unread=unread)):
        assert any(subject_matches(f, subject_of(env)) for f in filters) == waits
    assert unread_reports(None) == unread_reports(KueueConfig())  # Kueue's default: off


def test_an_admission_carries_the_manifest_as_submitted_up_to_the_limit() -> None:
    fact = fact_of(submitted(workload("a", cpu="500m")))
    assert isinstance(fact, Submit)
    assert fact.manifest_json.startswith("{")
    ctx = Context()
    ctx.manifests = {"ns/a": fact.manifest_json, "ns/big": "x" * (MANIFEST_COPY_LIMIT + 1)}
    decisions = decisions_from(
        [event(EventType.ADMITTED, "ns/a"), event(EventType.ADMITTED, "ns/big")], ctx
    )
    copied, too_big = (d.payload for d in decisions)
    assert isinstance(copied, pb.WorkloadAdmitted)
    assert isinstance(too_big, pb.WorkloadAdmitted)
    assert copied.manifest_json == fact.manifest_json
    assert copied.origin_cluster == "local"
    assert too_big.manifest_json == ""  # the submitted alone carries it


def test_a_submission_carries_the_job_it_stands_for() -> None:
    env = submitted(workload("a", cpu="500m"))
    env.submitted.owner_manifest_json = '{"kind": "Job"}'
    fact = fact_of(env)
    assert isinstance(fact, Submit)
    assert fact.owner_manifest_json == '{"kind": "Job"}'


def test_a_stored_submitted_with_two_variable_podsets_is_still_read() -> None:
    # Muster accepted several podsets with minCount before it refused them as Kueue's webhook
    # does: a workload submitted then is still read after the upgrade, not dropped.
    manifest = workload("old")
    main = manifest["spec"]["podSets"][0]
    manifest["spec"]["podSets"] = [
        {**main, "name": "a", "count": 2, "minCount": 1},
        {**main, "name": "b", "count": 2, "minCount": 1},
    ]
    fact = fact_of(submitted(manifest))
    assert isinstance(fact, Submit)
    assert [ps.min_count for ps in fact.workload.pod_sets] == [1, 1]
