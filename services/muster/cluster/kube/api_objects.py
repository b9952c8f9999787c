"""ApiObjects: the API objects of one cluster by `Resource`: read, listed and written through
the `Transport`, every request retried (`retry`, 409 Conflict re-reads included) before a
ClusterError leaves. What the backend's start, stop, copy and pod paths stand on.

Also what an API server's answer to a create means when it is not a success: the object
exists already (`already_exists`), or its namespace or its resource is missing
(`not_created`).
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import msgspec

from muster.api.resource import Resource
from muster.cluster.backend import Identity
from muster.cluster.errors import ClusterError, InvalidObjectError, NotFoundError
from muster.cluster.kube.resources import kueue_resources, resource_for
from muster.cluster.kube.retry import retrying
from muster.cluster.kube.settings import KubeConfig
from muster.cluster.kube.transport import MERGE_PATCH, Response, Transport
from muster.cluster.objects import check_node, check_pod

V = TypeVar("V")

NAMESPACED_DEFAULT = "default"
# What muster writes is checked as kubectl's writes are: an unknown field is an error, not a
# warning, so a field muster got wrong never silently disappears. (Status writes are not:
# `status`.)
STRICT = "Strict"
STRICT_QUERY = (("fieldValidation", STRICT),)


class ApiObjects:
    """Get, list, create, replace, merge-patch and delete objects of one cluster."""

    def __init__(self, transport: Transport, *, config: KubeConfig) -> None:
        self.transport = transport
        self.config = config
        self.kueue = kueue_resources(config.kueue_version)

    async def retrying(self, op: Callable[[], Awaitable[V]]) -> V:
        return await retrying(op, backoff=self.config.retry)

    def prepared(self, manifest: Mapping[str, Any]) -> tuple[Resource, str, str, dict[str, Any]]:
        """(resource, namespace, name, a copy of `manifest` as stored); raises for a Node or
        Pod that would not decode, or a kind muster does not write."""
        resource = resource_for(manifest, kueue_version=self.config.kueue_version)
        obj = copy.deepcopy(dict(manifest))
        obj.setdefault("apiVersion", resource.api_version)
        meta = obj.setdefault("metadata", {})
        name = str(meta.get("name") or "")
        if not name:
            raise InvalidObjectError(f"{resource.kind}/", ["metadata.name: is required"])
        namespace = ""
        if resource.namespaced:
            namespace = meta.get("namespace") or NAMESPACED_DEFAULT
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        checks = {"Node": check_node, "Pod": check_pod}.get(resource.kind)
        problems = list(checks(obj)) if checks is not None and resource.group == "" else []
        if problems:
            raise InvalidObjectError(resource.describe(name, namespace), problems)
        return resource, namespace, name, obj

    async def apply(
        self,
        manifest: Mapping[str, Any],
        *,
        as_user: Identity | None = None,
        field_validation: str = STRICT,
    ) -> None:
        """As the ClusterBackend protocol says; the API server validates the fields as
        `field_validation` asks (Strict: an unknown field is refused, in its words)."""
        resource, namespace, name, obj = self.prepared(manifest)
        who = resource.describe(name, namespace)
        query = [("fieldValidation", field_validation)]

        async def create_or_replace() -> None:
            created = await self.transport.request(
                "POST",
                resource.collection_path(namespace),
                obj=who,
                query=query,
                body=obj,
                as_user=as_user,
            )
            if created.ok:
                return
            if not already_exists(created):
                raise created.error(who)
            current = await self.get(resource, name, namespace, as_user=as_user)
            replacement = copy.deepcopy(obj)
            meta, old_meta = replacement["metadata"], current.get("metadata") or {}
            meta["resourceVersion"] = old_meta.get("resourceVersion", "")
            meta.setdefault("uid", old_meta.get("uid"))
            if "status" not in replacement and "status" in current:
                replacement["status"] = current["status"]
            await self.transport.checked(
                "PUT",
                resource.object_path(name, namespace),
                obj=who,
                query=query,
                body=replacement,
                as_user=as_user,
            )

        await self.retrying(create_or_replace)

    async def create(
        self,
        manifest: Mapping[str, Any],
        *,
        as_user: Identity | None = None,
        field_validation: str = STRICT,
    ) -> bool:
        """As the ClusterBackend protocol says."""
        resource, namespace, name, obj = self.prepared(manifest)
        who = resource.describe(name, namespace)

        async def create() -> bool:
            response = await self.transport.request(
                "POST",
                resource.collection_path(namespace),
                obj=who,
                query=[("fieldValidation", field_validation)],
                body=obj,
                as_user=as_user,
            )
            if response.ok:
                return True
            if already_exists(response):
                return False
            raise response.error(who)

        return await self.retrying(create)

    async def merge_patch(
        self,
        resource: Resource,
        name: str,
        namespace: str,
        patch: Mapping[str, Any],
        *,
        as_user: Identity | None = None,
    ) -> None:
        """Merge `patch` into the object (NotFoundError when there is none)."""
        path, who = resource.object_path(name, namespace), resource.describe(name, namespace)
        await self.retrying(
            lambda: self.transport.checked(
                "PATCH",
                path,
                obj=who,
                query=STRICT_QUERY,
                body=dict(patch),
                content_type=MERGE_PATCH,
                as_user=as_user,
            )
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str,
        *,
        uid: str = "",
        as_user: Identity | None = None,
    ) -> bool:
        """Delete the object, its dependents in the background; False when there was none
        (or, with `uid`, none with that uid)."""
        who = resource.describe(name, namespace)
        options: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:  # another object of that name is left alone (409: the precondition failed)
            options["preconditions"] = {"uid": uid}

        async def delete() -> bool:
            response = await self.transport.request(
                "DELETE",
                resource.object_path(name, namespace),
                obj=who,
                body=options,
                as_user=as_user,
            )
            if response.status == 404 or (uid and response.status == 409):
                return False
            if not response.ok:
                raise response.error(who)
            return True

        return await self.retrying(delete)

    async def get(
        self, resource: Resource, name: str, namespace: str = "", *, as_user: Identity | None = None
    ) -> dict[str, Any]:
        who = resource.describe(name, namespace)
        path = resource.object_path(name, namespace)
        obj: dict[str, Any] = await self.retrying(
            lambda: self.transport.checked("GET", path, obj=who, as_user=as_user)
        )
        return obj

    async def get_or_none(
        self, resource: Resource, name: str, namespace: str = ""
    ) -> dict[str, Any] | None:
        try:
            return await self.get(resource, name, namespace)
        except NotFoundError:
            return None

    async def listed(
        self, resource: Resource, *, namespace: str = "", **selectors: str
    ) -> list[dict[str, Any]]:
        query = [(k, v) for k, v in selectors.items() if v]
        items, _ = await self.retrying(
            lambda: self.transport.list_all(
                resource.collection_path(namespace),
                obj=f"{resource.kind}List",
                query=query,
                page_size=self.config.watch.page_size,
            )
        )
        return items


def already_exists(response: Response) -> bool:
    return response.status == 409 and b'"AlreadyExists"' in response.body


def not_created(
    response: Response, resource: Resource, who: str, *, namespace: str
) -> ClusterError:
    """Why a create was answered 404: its namespace does not exist (the API server's Status
    names `namespaces`), or the cluster does not serve `resource` at all (its "404 page not
    found": a CRD not installed), each said as such."""
    try:
        status = response.json()
    except msgspec.DecodeError:
        status = None
    details = status.get("details") if isinstance(status, dict) else None
    if isinstance(details, dict) and details.get("kind") == "namespaces":
        message = f"namespace {namespace} does not exist in this cluster"
        return ClusterError(who, "NamespaceNotFound", message)
    served = f"{resource.plural}.{resource.group or 'core'}/{resource.version}"
    if resource.group.endswith(".k8s.io") or "." not in resource.group:
        return ClusterError(who, "NotServed", f"{served} is not served by this cluster")
    message = f"the {resource.kind} CRD ({served}) is not installed in this cluster"
    return ClusterError(who, "NotServed", message)
