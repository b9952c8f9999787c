"""Admissions' payload parts built once per shape (`PayloadParts`): every payload is the one
built afresh from the admission, its flavors and its route, however many rounds share them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from muster.admission.admission_proto import PayloadParts, admission_to_proto, placement_hints
from muster.admission.decisions import Decision, Manifests, decisions_from
from muster.admission.routing import WorkloadRoute
from muster.api.model import (
    Admission,
    ObjectMeta,
    PodSet,
    PodSetAssignment,
    ResourceFlavor,
    Toleration,
    WorkloadKey,
)
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import Event, EventType

GI = 1024**3 * 1000  # milli-units


def assignment(name: str, count: int = 1, **flavors_usage: tuple[str, int]) -> PodSetAssignment:
    return PodSetAssignment(
        name=name,
        flavors={r.replace("_", "/"): f for r, (f, _) in flavors_usage.items()},
        count=count,
        resource_usage={r.replace("_", "/"): u for r, (_, u) in flavors_usage.items()},
    )


ONE = Admission(
    cluster_queue="cq-a",
    pod_set_assignments=(assignment("main", cpu=("default", 1500), memory=("default", 2 * GI)),),
)
ADMISSIONS: dict[str, Admission] = {
    "ns/one": ONE,
    "ns/same": ONE,  # the same shape as another workload's
    "ns/other-queue": Admission(cluster_queue="cq-b", pod_set_assignments=ONE.pod_set_assignments),
    "ns/more-cpu": Admission(
        cluster_queue="cq-a",
        pod_set_assignments=(assignment("main", cpu=("default", 2500), memory=("default", GI)),),
    ),
    "ns/gang": Admission(
        cluster_queue="cq-a",
        pod_set_assignments=(
            assignment("driver", cpu=("on-demand", 1000)),
            assignment("workers", 4, cpu=("spot", 8000), nvidia_com_gpu=("gpu", 4000)),
        ),
    ),
    "ns/routed": ONE,
}


def flavor(name: str, **labels: str) -> ResourceFlavor:
    return ResourceFlavor(
        meta=ObjectMeta(name=name),
        node_labels=labels,
        tolerations=(Toleration(key=name, operator="Exists", effect="NoSchedule"),),
    )


class Context:
    """A DecisionContext of the workloads above (checks on `checked` only)."""

    def __init__(self) -> None:
        self.flavor_map: dict[str, ResourceFlavor] = {
            "default": flavor("default", pool="general"),
            "spot": flavor("spot", pool="spot", zone="a"),
            "gpu": flavor("gpu", accelerator="h100"),
        }  # "on-demand" names no flavor: it adds nothing
        self.checked: set[str] = {"ns/gang"}
        self.routes = {
            "ns/routed": WorkloadRoute(
                queue_name="lq-cpu",
                away=True,
                pod_sets=(PodSet(name="main", count=1, requests={"cpu": 4000}),),
                run_s=90.0,
            )
        }

    def admission_of(self, key: WorkloadKey) -> Admission | None:
        return ADMISSIONS.get(key)

    def checks_of(self, key: WorkloadKey) -> Sequence[str]:
        return ("prov",) if key in self.checked else ()

    def has_checks(self, key: WorkloadKey) -> bool:
        return key in self.checked

    def cluster_queue_of(self, key: WorkloadKey) -> str:
        return ADMISSIONS[key].cluster_queue

    def cluster_of(self, key: WorkloadKey) -> str:
        return "local"

    def generation_of(self, key: WorkloadKey) -> int:
        return 1

    def submitted_id_of(self, key: WorkloadKey) -> str:
        return f"submitted-{key}"

    def manifests_of(self, key: WorkloadKey) -> Manifests:
        return Manifests(workload_json=f'{{"name": "{key}"}}', origin_cluster="east")

    def route_of(self, key: WorkloadKey) -> WorkloadRoute | None:
        return self.routes.get(key)

    @property
    def flavors(self) -> Mapping[str, ResourceFlavor]:
        return self.flavor_map


def admitted(keys: Sequence[str]) -> list[Event]:
    """Each workload's reservation, then its admission, in one round."""
    return [
        Event(time=1.0, type=t, object=key)
        for key in keys
        for t in (EventType.QUOTA_RESERVED, EventType.ADMITTED)
    ]


def afresh(
    d: Decision, ctx: Context, *, with_reservation: bool
) -> pb.QuotaReserved | pb.WorkloadAdmitted:
    """`d`'s payload built from nothing kept: the admission, the flavors and the route now."""
    key = WorkloadKey(d.workload)
    a = ADMISSIONS[key]
    if d.field == "quota_reserved":
        return pb.QuotaReserved(
            admission=admission_to_proto(a), admission_checks=ctx.checks_of(key)
        )
    return pb.WorkloadAdmitted(
        admission=admission_to_proto(a),
        hints=placement_hints(a, ctx.flavors, ctx.route_of(key)),
        manifest_json=ctx.manifests_of(key).workload_json,
        origin_cluster="east",
        with_reservation=with_reservation,
    )


def assert_as_built_afresh(decisions: Sequence[Decision], ctx: Context) -> None:
    for d in decisions:
        told_once = d.field == "admitted" and not ctx.has_checks(WorkloadKey(d.workload))
        expected = afresh(d, ctx, with_reservation=told_once)
        got = d.payload.SerializeToString(deterministic=True)
        assert got == expected.SerializeToString(deterministic=True), d.workload


def test_payloads_from_parts_kept_over_rounds_are_the_ones_built_afresh() -> None:
    ctx, parts = Context(), PayloadParts()
    for _ in range(3):  # later rounds read what the first built
        decisions = decisions_from(admitted(list(ADMISSIONS)), ctx, parts=parts)
        assert [(d.field, d.workload) for d in decisions] == [
            ("admitted", "ns/one"),
            ("admitted", "ns/same"),
            ("admitted", "ns/other-queue"),
            ("admitted", "ns/more-cpu"),
            ("quota_reserved", "ns/gang"),
            ("admitted", "ns/gang"),
            ("admitted", "ns/routed"),
        ]
        assert_as_built_afresh(decisions, ctx)
    gang = decisions[5].payload
    assert isinstance(gang, pb.WorkloadAdmitted)
    assert [dict(h.node_selector) for h in gang.hints] == [
        {},
        {"pool": "spot", "zone": "a", "accelerator": "h100"},
    ]
    routed = decisions[6].payload
    assert isinstance(routed, pb.WorkloadAdmitted)
    assert dict(routed.hints[0].requests) == {"cpu": "4"}


def test_a_flavor_applied_again_or_deleted_changes_the_next_admissions_hints() -> None:
    ctx, parts = Context(), PayloadParts()

    def hints_of_one() -> dict[str, str]:
        (d,) = decisions_from(admitted(["ns/one"]), ctx, parts=parts)
        assert_as_built_afresh([d], ctx)
        assert isinstance(d.payload, pb.WorkloadAdmitted)
        return dict(d.payload.hints[0].node_selector)

    assert hints_of_one() == {"pool": "general"}
    ctx.flavor_map["default"] = flavor("default", pool="reserved")  # as the config applies one
    assert hints_of_one() == {"pool": "reserved"}
    del ctx.flavor_map["default"]
    assert hints_of_one() == {}
    ctx.flavor_map["default"] = flavor("default", pool="general")
    assert hints_of_one() == {"pool": "general"}


def test_parts_past_their_limit_still_build_every_payload() -> None:
    ctx, parts = Context(), PayloadParts(limit=1)
    for _ in range(2):
        assert_as_built_afresh(decisions_from(admitted(list(ADMISSIONS)), ctx, parts=parts), ctx)
