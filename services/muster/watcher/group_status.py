"""The conditions kube-scheduler would write on scheduling.k8s.io PodGroups, folded from
gang-permit's events, so `kubectl describe podgroup` tells the truth (Kubernetes only).

- `PodGroupInitiallyScheduled` (v1alpha2: `PodGroupScheduled`): "False", reason
  `Unschedulable` and gang-permit's reason, on `gang_waiting`; "True", reason `Scheduled`, on
  `gang_permitted`, and never "False" again.
- `DisruptionTarget`: "True", reason `PreemptionByScheduler`, when a `placement_preempted`
  names the group as a victim (a group evicted whole: disruption mode `all`).

Events name gangs by key ("<namespace>/<name>" for a PodGroup); only keys of PodGroups the
cluster holds (`learn`, from the watcher's cluster watch) get a status: other gangs (Kueue
workloads, v1alpha1 Workloads, scheduler-plugins PodGroups, pods) share the key space. A
CompositePodGroup tree not placed yet waits under its root's key: every PodGroup under it
(by `parentCompositePodGroupName`, learnt from the watch) gets the reason. Gang-permit watches
the cluster on its own, so its event may come before the watcher's watch shows the PodGroup:
the condition waits under the key (the newest `PENDING_MAX` such keys) until it does. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.core.conditions import condition_message

GANG_EVENTS = ("gang_waiting", "gang_permitted", "placement_preempted")
KIND = "PodGroup"  # ObjectRef.kind of a scheduling.k8s.io PodGroup's status
SCHEDULED = "PodGroupInitiallyScheduled"  # v1.36 (v1alpha2) called it PodGroupScheduled
# Conditions of keys the watch has not shown (yet): most are gangs of other kinds, which never
# show, so only the newest are kept; a PodGroup shows within a watch's lag of its pods.
PENDING_MAX = 4096


class GroupStatusBook:
    """Desired PodGroup conditions, by gang key."""

    def __init__(self) -> None:
        self._versions: dict[str, str] = {}  # known PodGroups: key → apiVersion
        self._conditions: dict[str, dict[str, dict[str, str]]] = {}  # key → type → condition
        self._parents: dict[str, str] = {}  # PodGroup or CompositePodGroup → parent's key
        self._pending: dict[str, None] = {}  # keys with conditions not shown yet, oldest first

    def learn(self, key: str, api_version: str, *, parent: str = "") -> ObjectRef | None:
        """PodGroup `key` (under CompositePodGroup `parent`, a key, if any) exists in the
        cluster: its ref when it has a status to write."""
        new = key not in self._versions
        self._versions[key] = api_version
        self._pending.pop(key, None)
        self.learn_parent(key, parent)
        if new and key not in self._conditions:
            self._inherit(key)
        return _ref(key) if new and key in self._conditions else None

    def _inherit(self, key: str) -> None:
        """A PodGroup shown after its tree's root was said to wait takes the root's reason."""
        seen, parent = {key}, self._parents.get(key)
        while parent is not None and parent not in seen:
            held = self._conditions.get(parent, {}).get(SCHEDULED)
            if held is not None and parent in self._pending:
                self._conditions[key] = {SCHEDULED: dict(held)}
                return
            seen.add(parent)
            parent = self._parents.get(parent)

    def learn_parent(self, key: str, parent: str) -> None:
        """`key` (a PodGroup or CompositePodGroup) hangs under `parent` ("" for none)."""
        if parent:
            self._parents[key] = parent
        else:
            self._parents.pop(key, None)

    def forget(self, key: str) -> None:
        self._versions.pop(key, None)
        self._pending.pop(key, None)
        self._conditions.pop(key, None)
        self._parents.pop(key, None)

    def _under(self, root: str) -> list[str]:
        """The known PodGroups in the tree of CompositePodGroup `root`; [root] for a gang."""
        if root in self._versions:
            return [root]
        found = []
        for key in sorted(self._versions):
            seen, parent = set(), self._parents.get(key)
            while parent is not None and parent not in seen and parent != root:
                seen.add(parent)
                parent = self._parents.get(parent)
            if parent == root:
                found.append(key)
        return found

    def apply(self, env: pb.Envelope) -> list[ObjectRef]:
        """Fold one event in; the PodGroups whose desired status changed."""
        match env.WhichOneof("payload"):
            case "gang_waiting":  # a tree waits as one: each of its PodGroups says why
                reason = env.gang_waiting.reason
                held = [] if env.workload in self._versions else [env.workload]  # shown later
                changed = [
                    k
                    for k in self._under(env.workload) + held
                    for k in self._set_scheduled(k, False, reason)
                ]
            case "gang_permitted":
                changed = self._set_scheduled(env.workload, True, "")
            case "placement_preempted":
                message = f"Preempted to place {env.workload}"
                changed = [
                    key
                    for key in env.placement_preempted.victims
                    if self._set(key, "DisruptionTarget", True, "PreemptionByScheduler", message)
                ]
            case _:
                changed = []
        return [_ref(key) for key in changed if key in self._versions]

    def status_of(self, key: str) -> dict[str, Any] | None:
        conditions = self._conditions.get(key)
        version = self._versions.get(key)
        if not conditions or version is None:
            return None
        scheduled = "PodGroupScheduled" if version.endswith("/v1alpha2") else SCHEDULED
        return {
            "conditions": [
                {**c, "type": scheduled} if c["type"] == SCHEDULED else dict(c)
                for c in conditions.values()
            ]
        }

    def refs(self) -> Iterator[ObjectRef]:
        for key in sorted(self._conditions):
            if key in self._versions:
                yield _ref(key)

    def _set_scheduled(self, key: str, scheduled: bool, message: str) -> list[str]:
        # Held as SCHEDULED whatever the version (which may not be known yet): `status_of`
        # names it as the PodGroup's version does.
        current = self._conditions.get(key, {}).get(SCHEDULED)
        if current is not None and current["status"] == "True":
            return []  # a terminal success: it never reverts
        reason = "Scheduled" if scheduled else "Unschedulable"
        return [key] if self._set(key, SCHEDULED, scheduled, reason, message) else []

    def _set(self, key: str, kind: str, status: bool, reason: str, message: str) -> bool:
        condition = {
            "type": kind,
            "status": "True" if status else "False",
            "reason": reason,
            "message": condition_message(message),
        }
        conditions = self._conditions.setdefault(key, {})
        if conditions.get(kind) == condition:
            return False
        conditions[kind] = condition
        if key not in self._versions:
            self._hold(key)
        return True

    def _hold(self, key: str) -> None:
        self._pending.pop(key, None)
        self._pending[key] = None
        if len(self._pending) > PENDING_MAX:
            oldest = next(iter(self._pending))
            del self._pending[oldest]
            self._conditions.pop(oldest, None)


def _ref(key: str) -> ObjectRef:
    namespace, _, name = key.partition("/")
    return ObjectRef(kind=KIND, name=name, namespace=namespace)
