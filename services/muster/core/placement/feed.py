"""The gang feed: a cluster's gang sources and which gang each pod is in, kept from objects.

One pure book shared by gang-permit and the simulator (issue 18 item 2). Objects go in: the
gang sources (`put`/`remove`: scheduling.k8s.io Workloads, PodGroups of both APIs,
CompositePodGroups, PriorityClasses), the gangs of Kueue admissions (`admit`/`end`), and pods
(`membership` to learn a pod's gang, `enter` to record it, `forget` when it goes). What they
touch comes out as data, never as a call back: the pods whose gang must be looked at again,
and the gang a pod left (`Left`), with whether that gang is now empty. The callers tell the
`GangScheduler` what changed; only they know what they hold back from it (gang-permit's parked
gangs, the simulator's arrival times).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from muster.api.model import (
    CompositePodGroup,
    Pod,
    PodGroup,
    PriorityClass,
    SchedulingPodGroup,
    SchedulingWorkload,
)
from muster.api.wellknown import POD_GROUP_LABEL, WORKLOAD_LABEL
from muster.core.placement.model import GangKey, GangSpec, PodKey
from muster.core.placement.sources import GroupIndex, Membership, membership, priority_of

GangSource = SchedulingWorkload | PodGroup | SchedulingPodGroup | CompositePodGroup | PriorityClass

NO_PODS: tuple[PodKey, ...] = ()


class Left(msgspec.Struct, frozen=True, kw_only=True):
    """The gang a pod left (None: it was in none, or stays), and whether no pod of it is left."""

    gang: GangKey | None = None
    emptied: bool = False


NOT_LEFT = Left()


def source_key(pod: Pod) -> str | None:
    """The gang source `pod` names, in `membership`'s order of precedence:
    "workload:", "podgroup:", "kueue:" or "group:" and "<namespace>/<name>"."""
    namespace = pod.meta.namespace
    if pod.workload_ref is not None:
        return f"workload:{namespace}/{pod.workload_ref.name}"
    group = pod.meta.labels.get(POD_GROUP_LABEL)
    if group:
        return f"podgroup:{namespace}/{group}"
    name = pod.meta.labels.get(WORKLOAD_LABEL)
    if name:
        return f"kueue:{namespace}/{name}"
    if pod.scheduling_group:
        return f"group:{namespace}/{pod.scheduling_group}"
    return None


class GangFeed:
    """Gang sources, Kueue gangs and pod membership of one cluster; see the module docstring.

    `configured` PriorityClasses (the event stream's, a scenario's) are overridden by those
    the cluster reports (`put`).
    """

    def __init__(self, *, configured: Mapping[str, PriorityClass] | None = None) -> None:
        self.configured: dict[str, PriorityClass] = dict(configured or {})
        self.cluster_priority_classes: dict[str, PriorityClass] = {}
        self.workloads: dict[str, SchedulingWorkload] = {}  # keyed "<namespace>/<name>"
        self.pod_groups: dict[str, PodGroup] = {}
        self.native_groups: dict[str, SchedulingPodGroup] = {}  # scheduling.k8s.io PodGroups
        self.composites: dict[str, CompositePodGroup] = {}
        self.admitted: dict[str, GangSpec] = {}  # Kueue gangs, by workload (= gang) key
        self.by_source: dict[str, set[PodKey]] = {}  # see `source_key`
        self.source_of: dict[PodKey, str] = {}
        self.members: dict[GangKey, dict[PodKey, None]] = {}  # in the order they joined
        self.gang_of: dict[PodKey, GangKey] = {}

    # --- gang sources -----------------------------------------------------------------------

    def put(self, obj: GangSource) -> tuple[PodKey, ...]:
        """A gang source as it is now; the pods whose gang it may change (none when unchanged:
        a PodGroup's conditions are a scheduler's, not news)."""
        match obj:
            case SchedulingWorkload():
                key = f"{obj.meta.namespace}/{obj.meta.name}"
                if self.workloads.get(key) == obj:
                    return NO_PODS
                self.workloads[key] = obj
                return self.pods_of(f"workload:{key}")
            case PodGroup():
                key = f"{obj.meta.namespace}/{obj.meta.name}"
                if self.pod_groups.get(key) == obj:
                    return NO_PODS
                self.pod_groups[key] = obj
                return self.pods_of(f"podgroup:{key}")
            case SchedulingPodGroup():
                before = self.native_groups.get(obj.key)
                self.native_groups[obj.key] = obj
                return NO_PODS if _same_spec(before, obj) else self._groups_changed(obj)
            case CompositePodGroup():
                before_composite = self.composites.get(obj.key)
                self.composites[obj.key] = obj
                return NO_PODS if _same_spec(before_composite, obj) else self._groups_changed(obj)
            case PriorityClass():  # read when a pod is next seen; placed pods keep theirs
                self.cluster_priority_classes[obj.meta.name] = obj
        return NO_PODS

    def remove(self, obj: GangSource) -> tuple[PodKey, ...]:
        """A gang source was deleted (`obj` is its last state); the pods it may change."""
        match obj:
            case SchedulingWorkload():
                key = f"{obj.meta.namespace}/{obj.meta.name}"
                self.workloads.pop(key, None)
                return self.pods_of(f"workload:{key}")
            case PodGroup():
                key = f"{obj.meta.namespace}/{obj.meta.name}"
                self.pod_groups.pop(key, None)
                return self.pods_of(f"podgroup:{key}")
            case SchedulingPodGroup():
                self.native_groups.pop(obj.key, None)
                return self._groups_changed(obj)
            case CompositePodGroup():
                self.composites.pop(obj.key, None)
                return self._groups_changed(obj)
            case PriorityClass():
                self.cluster_priority_classes.pop(obj.meta.name, None)
        return NO_PODS

    def admit(self, spec: GangSpec) -> tuple[PodKey, ...]:
        """A Kueue workload's admission, as its gang; the pods of that workload."""
        self.admitted[spec.key] = spec
        return self.pods_of(f"kueue:{spec.key}")

    def end(self, key: str) -> tuple[PodKey, ...]:
        """A Kueue workload's admission ended; the pods of that workload."""
        self.admitted.pop(key, None)
        return self.pods_of(f"kueue:{key}")

    def _groups_changed(self, obj: SchedulingPodGroup | CompositePodGroup) -> tuple[PodKey, ...]:
        """A scheduling.k8s.io PodGroup's pods; for a CompositePodGroup, those of every PodGroup
        of its namespace (any may be under it)."""
        if isinstance(obj, SchedulingPodGroup):
            return self.pods_of(f"group:{obj.key}")
        prefix = f"group:{obj.meta.namespace}/"
        sources = sorted(s for s in self.by_source if s.startswith(prefix))
        return tuple(pod for source in sources for pod in self.pods_of(source))

    def pods_of(self, source: str) -> tuple[PodKey, ...]:
        return tuple(sorted(self.by_source.get(source, ())))

    # --- pods -------------------------------------------------------------------------------

    def priority_classes(self) -> Mapping[str, PriorityClass]:
        if not self.cluster_priority_classes:
            return self.configured
        return {**self.configured, **self.cluster_priority_classes}

    def groups(self) -> GroupIndex:
        return GroupIndex(
            pod_groups=self.native_groups,
            composites=self.composites,
            priority_classes=self.priority_classes(),
        )

    def priority(self, pod: Pod) -> int:
        """The pod's priority as Kubernetes resolves it from what it wrote."""
        return priority_of(pod, self.priority_classes())

    def membership(self, pod: Pod) -> tuple[Membership, int]:
        """The gang a pod of muster's joins now, and its priority: a Kueue workload's pods
        have the workload's (the binder writes none on them), a scheduling.k8s.io PodGroup's
        pods the group's. The pod is indexed under its source, so a change of the source lists
        it; `enter` records it in its gang."""
        self.index(PodKey(pod.key), pod)
        admitted = self._admitted_of(pod)
        priority = next((spec.priority for spec in admitted.values()), self.priority(pod))
        found = membership(
            pod,
            workloads=self.workloads,
            pod_groups=self.pod_groups,
            admitted=admitted,
            priority=priority,
            groups=self.groups(),
        )
        return found, priority if found.priority is None else found.priority

    def _admitted_of(self, pod: Pod) -> dict[str, GangSpec]:
        """The spec of the pod's Kueue gang if admitted, by key (one lookup, not a copy of all)."""
        name = pod.meta.labels.get(WORKLOAD_LABEL)
        key = f"{pod.meta.namespace}/{name}"
        found = self.admitted.get(key) if name else None
        return {key: found} if found is not None else {}

    def enter(self, key: PodKey, gang: GangKey | None) -> Left:
        """Record `key` as a pod of `gang` (None: on its own), leaving the gang it was in."""
        old = self.gang_of.get(key)
        if old == gang:
            return NOT_LEFT
        emptied = False
        if old is not None:
            del self.gang_of[key]
            pods = self.members[old]
            pods.pop(key, None)
            if not pods:
                del self.members[old]
                emptied = True
        if gang is not None:
            self.gang_of[key] = gang
            self.members.setdefault(gang, {})[key] = None
        return Left(gang=old, emptied=emptied)

    def forget(self, key: PodKey) -> Left:
        """The pod is gone (or no longer muster's to place)."""
        self.index(key, None)
        return self.enter(key, None)

    def index(self, key: PodKey, pod: Pod | None) -> None:
        """Index `key` under its gang source (None: under none)."""
        source = source_key(pod) if pod is not None else None
        old = self.source_of.get(key)
        if old == source:
            return
        if old is not None:
            del self.source_of[key]
            pods = self.by_source[old]
            pods.discard(key)
            if not pods:
                del self.by_source[old]
        if source is not None:
            self.source_of[key] = source
            self.by_source.setdefault(source, set()).add(key)


def _same_spec(
    a: SchedulingPodGroup | CompositePodGroup | None, b: SchedulingPodGroup | CompositePodGroup
) -> bool:
    """Whether two states of a group differ only in what placement does not read (status)."""
    if a is None:
        return False
    return msgspec.structs.replace(a, conditions=()) == msgspec.structs.replace(b, conditions=())
