"""Which versions of the scheduling.k8s.io gang API the API server serves, and so which
resources muster watches and writes: the newest version serving each kind.

Kubernetes v1.35 serves Workload at v1alpha1; v1.36 Workload and PodGroup at v1alpha2; v1.37
Workload and PodGroup at v1beta1 (and v1alpha3, with CompositePodGroup at v1alpha3 only). The
feature gates are off by default in every release: a cluster may serve none of it, and muster
then runs without it (Jobs, Kueue workloads and scheduler-plugins PodGroups still work).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping

from muster.api.resource import Resource
from muster.cluster.errors import NotFoundError
from muster.cluster.kube.resources import (
    SCHEDULING_GROUP,
    gang_resource,
)
from muster.cluster.kube.transport import Transport

GANG_KINDS = {
    "workloads": "Workload",
    "podgroups": "PodGroup",
    "compositepodgroups": "CompositePodGroup",
}


def version_rank(version: str) -> tuple[int, int, int]:
    """Lower is newer: v1 < v1beta2 < v1beta1 < v1alpha3 < v1alpha1 (Kubernetes' preference)."""
    found = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if found is None:
        return (9, 0, 0)
    stability = {None: 0, "beta": 1, "alpha": 2}[found.group(2)]
    return (stability, -int(found.group(1)), -int(found.group(3) or 0))


def newest(served: Mapping[str, set[str]]) -> dict[str, Resource]:
    """Kind → the resource of its newest served version, from plural → versions serving it."""
    return {
        GANG_KINDS[plural]: gang_resource(plural, min(versions, key=version_rank))
        for plural, versions in served.items()
        if plural in GANG_KINDS and versions
    }


class GangApi:
    """The gang API resources of one API server, discovered once and kept (`forget` to look
    again, e.g. when a watch is restarted)."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._found: dict[str, Resource] | None = None
        self._lock = asyncio.Lock()

    async def resources(self) -> dict[str, Resource]:
        """Kind ("Workload", "PodGroup", "CompositePodGroup") → the resource to use; empty
        when the group serves none of them."""
        async with self._lock:
            if self._found is None:
                self._found = newest(await self._served())
            return dict(self._found)

    def forget(self) -> None:
        self._found = None

    async def _served(self) -> dict[str, set[str]]:
        root = f"/apis/{SCHEDULING_GROUP}"
        try:
            group = await self._transport.checked("GET", root, obj="APIGroup/scheduling.k8s.io")
        except NotFoundError:
            return {}
        served: dict[str, set[str]] = {}
        for entry in group.get("versions") or []:
            version = entry.get("version") if isinstance(entry, dict) else None
            if not isinstance(version, str) or version == "v1":
                continue  # v1 serves PriorityClasses only
            try:
                listing = await self._transport.checked(
                    "GET", f"{root}/{version}", obj=f"APIResourceList/{SCHEDULING_GROUP}/{version}"
                )
            except NotFoundError:
                continue
            for resource in listing.get("resources") or []:
                name = resource.get("name") if isinstance(resource, dict) else None
                if isinstance(name, str) and "/" not in name:
                    served.setdefault(name, set()).add(version)
        return served
