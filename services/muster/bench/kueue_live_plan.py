"""What `muster bench kueue-live` sends and how it reads the result back.

The same plan as `bench admission` (`kueue_perf.generate`), written as Kueue manifests for
`Gateway.Submit`; and the live run's stored events turned back into the simulator's `Event`s,
so the very metrics of `bench admission` (`metrics.measure`) read the live run as well.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from muster.api.encode import quantities_to_strings, workload_to_kueue
from muster.api.model import ClusterQueue, LocalQueue, ResourceFlavor, Workload
from muster.bench.kueue_perf import Plan, PlannedWorkload
from muster.core.events import Event, EventType
from muster.sim.annotations import SUBMIT_AFTER

KUEUE: Final = "kueue.x-k8s.io/v1beta2"
# One workload in a ClusterQueue of its own, outside every cohort: once it finished, the
# configuration has reached admission and every per-cluster service is up.
WARM_UP_QUEUE: Final = "warm-up"
WARM_UP_NAMESPACE: Final = "warm-up"
WARM_UP_KEY: Final = f"{WARM_UP_NAMESPACE}/warm-up"

# Live event -> the simulator's event the metrics read. Quota is held from `quota_reserved`
# (or an `admitted` with its reservation, `as_sim_events`) until `eviction_completed`
# (admission releases it then, not at `evicted`) or `finished`.
LIVE_TYPES: Final[Mapping[str, EventType]] = {
    "quota_reserved": EventType.QUOTA_RESERVED,
    "eviction_completed": EventType.EVICTED,
    "requeued": EventType.REQUEUED,
    "finished": EventType.FINISHED,
}


def config_manifest(plan: Plan) -> str:
    """The flavor, every ClusterQueue and LocalQueue of `plan`, and the warm-up queue."""
    docs: list[dict[str, Any]] = []
    for obj in plan.objects:
        if isinstance(obj, ResourceFlavor):
            docs.append({"apiVersion": KUEUE, "kind": "ResourceFlavor",
                         "metadata": {"name": obj.meta.name}})  # fmt: skip
        elif isinstance(obj, ClusterQueue):
            docs.append(cluster_queue_manifest(obj))
        elif isinstance(obj, LocalQueue):
            docs.append(local_queue_manifest(obj.meta.namespace, obj.meta.name, obj.cluster_queue))
    docs.append(warm_up_queue_manifest())
    docs.append(local_queue_manifest(WARM_UP_NAMESPACE, WARM_UP_QUEUE, WARM_UP_QUEUE))
    return join(docs)


def cluster_queue_manifest(cq: ClusterQueue) -> dict[str, Any]:
    """A ClusterQueue as `kueue_perf.cluster_queue` builds them: quota, cohort, preemption."""
    groups = [
        {
            "coveredResources": list(group.covered_resources),
            "flavors": [
                {
                    "name": flavor.name,
                    "resources": [
                        _quota(q.name, q.nominal_quota, q.borrowing_limit) for q in flavor.resources
                    ],
                }
                for flavor in group.flavors
            ],
        }
        for group in cq.resource_groups
    ]
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "queueingStrategy": cq.queueing_strategy.value,
        "preemption": {
            "withinClusterQueue": cq.preemption.within_cluster_queue.value,
            "reclaimWithinCohort": cq.preemption.reclaim_within_cohort.value,
        },
        "resourceGroups": groups,
    }
    if cq.cohort:
        spec["cohort"] = cq.cohort
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": cq.meta.name},
            "spec": spec}  # fmt: skip


def _quota(resource: str, nominal: int, borrowing_limit: int | None) -> dict[str, str]:
    quota = {"name": resource, "nominalQuota": quantities_to_strings({resource: nominal})[resource]}
    if borrowing_limit is not None:
        quota["borrowingLimit"] = quantities_to_strings({resource: borrowing_limit})[resource]
    return quota


def local_queue_manifest(namespace: str, name: str, cluster_queue: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "LocalQueue",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"clusterQueue": cluster_queue}}  # fmt: skip


def warm_up_queue_manifest() -> dict[str, Any]:
    flavor = {"name": "default", "resources": [_quota("cpu", 1000, None)]}
    spec = {"namespaceSelector": {}, "resourceGroups": [
        {"coveredResources": ["cpu"], "flavors": [flavor]}
    ]}  # fmt: skip
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": WARM_UP_QUEUE},
            "spec": spec}  # fmt: skip


def workload_manifests(plan: Plan) -> dict[str, str]:
    """Workload key -> its manifest, in plan order. The client submits each at its arrival
    itself, so `submit-after` (which only the simulator reads) is left out."""
    out: dict[str, str] = {}
    for obj in plan.objects:
        if isinstance(obj, Workload):
            manifest = workload_to_kueue(obj)
            annotations = manifest["metadata"]["annotations"]
            manifest["metadata"]["annotations"] = {
                k: v for k, v in annotations.items() if k != SUBMIT_AFTER
            }
            out[obj.key] = json.dumps(manifest)  # JSON is YAML
    return out


def warm_up_manifest() -> str:
    namespace, name = WARM_UP_KEY.split("/")
    return json.dumps({
        "apiVersion": KUEUE, "kind": "Workload",
        "metadata": {"namespace": namespace, "name": name,
                     "annotations": {"muster.dev/run-seconds": "0.01"}},
        "spec": {"queueName": WARM_UP_QUEUE, "podSets": [{
            "name": "main", "count": 1,
            "template": {"spec": {"containers": [
                {"name": "main", "resources": {"requests": {"cpu": "100m"}}}]}}}]},
    })  # fmt: skip


def join(docs: Iterable[Mapping[str, Any]]) -> str:
    return "\n---\n".join(json.dumps(doc) for doc in docs)


class LiveEvent(msgspec.Struct, frozen=True):
    """One stored workload event: its type ("finished"), workload key and time (ns)."""

    type: str
    workload: str
    time_ns: int


def as_sim_events(events: Sequence[LiveEvent], *, start_ns: int) -> list[Event]:
    """The events the metrics read, in time order, timed in seconds from `start_ns`.

    `events` in stream order: an `admitted` of a workload holding no quota is admitted with its
    reservation (docs/events.md), so it is read as the QuotaReserved too."""
    holding: set[str] = set()
    out = []
    for e in events:
        read = LIVE_TYPES.get(e.type)
        if e.type == "admitted" and e.workload not in holding:
            read = EventType.QUOTA_RESERVED
        if read is EventType.QUOTA_RESERVED:
            holding.add(e.workload)
        elif read in (EventType.EVICTED, EventType.FINISHED):
            holding.discard(e.workload)
        if read is not None:
            out.append(Event(time=(e.time_ns - start_ns) / 1e9, type=read, object=e.workload))
    out.sort(key=lambda e: e.time)  # stable: stream order on ties
    return out


def arrived(
    planned: Sequence[PlannedWorkload], submitted_ns: Mapping[str, int], *, start_ns: int
) -> list[PlannedWorkload]:
    """`planned` with each arrival as it happened: when the client started its Submit."""
    return [
        msgspec.structs.replace(wl, arrival_s=(submitted_ns[wl.key] - start_ns) / 1e9)
        if wl.key in submitted_ns
        else wl
        for wl in planned
    ]
