"""Pods placed before they exist: those of Kueue gangs whose pods the binder creates on their
nodes at `gang_permitted` (docs/events.md, "Pods created on their nodes"). Each is kept as it
will be made, from the gang's admission, until the cluster shows it made for that admission.
Pure.
"""

from __future__ import annotations

import msgspec

from muster.api.model import Pod
from muster.api.wellknown import PARTITION_ANNOTATION, TRACEPARENT_ANNOTATION
from muster.cluster.objects import ADMISSION_LABEL
from muster.core.placement.model import GangKey, PodKey


class UnmadePods:
    """The pods to create, by key and by gang."""

    def __init__(self) -> None:
        self.pods: dict[PodKey, Pod] = {}
        self._gang_of: dict[PodKey, GangKey] = {}
        self._by_gang: dict[GangKey, set[PodKey]] = {}

    def add(self, gang: GangKey, pod: Pod) -> None:
        key = PodKey(pod.key)
        self.pods[key] = pod
        self._gang_of[key] = gang
        self._by_gang.setdefault(gang, set()).add(key)

    def of(self, gang: GangKey) -> bool:
        """Whether `gang` has a pod not made yet."""
        return bool(self._by_gang.get(gang))

    def made(self, pod: Pod, admission: int) -> None:
        """`pod` is in the cluster: made, when it is of `admission` (its gang's, now); a pod
        of that name of another admission is not (it is one left, about to go)."""
        key = PodKey(pod.key)
        gang = self._gang_of.get(key)
        if gang is None or pod.meta.labels.get(ADMISSION_LABEL, "") != (
            str(admission) if admission else ""
        ):
            return
        self.forget(key)

    def forget(self, key: PodKey) -> Pod | None:
        """Forget pod `key` (made, or never to be); return it, if it was one to create."""
        gang = self._gang_of.pop(key, None)
        if gang is None:
            return None
        self._by_gang[gang].discard(key)
        if not self._by_gang[gang]:
            del self._by_gang[gang]
        return self.pods.pop(key)

    def gang_of(self, key: PodKey) -> GangKey | None:
        return self._gang_of.get(key)

    def drop(self, gang: GangKey) -> list[tuple[PodKey, Pod]]:
        """Forget `gang`'s pods not made; return them."""
        keys = sorted(self._by_gang.pop(gang, ()))
        for key in keys:
            del self._gang_of[key]
        return [(key, self.pods.pop(key)) for key in keys]


# What the binder writes on the pods it makes for the watcher's events, read by no placement.
_FOR_THE_WATCHER = frozenset({PARTITION_ANNOTATION, TRACEPARENT_ANNOTATION})


def made_as_placed(made: Pod, unmade: Pod) -> bool:
    """Whether `made` is `unmade` as placement reads it (gang source, requests, constraints,
    priority, annotations), but for what making it adds: a uid, a creation time, the
    admission's label, its owner's references, the watcher's annotations, its node and
    phase."""
    meta = msgspec.structs.replace(
        made.meta,
        uid=unmade.meta.uid,
        creation_timestamp=unmade.meta.creation_timestamp,
        labels={k: v for k, v in made.meta.labels.items() if k != ADMISSION_LABEL},
        annotations={k: v for k, v in made.meta.annotations.items() if k not in _FOR_THE_WATCHER},
        owner_references=unmade.meta.owner_references,
    )
    as_unmade = msgspec.structs.replace(
        made, meta=meta, node_name=unmade.node_name, phase=unmade.phase
    )
    return as_unmade == unmade
