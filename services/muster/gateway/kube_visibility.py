"""Kueue's visibility API (`visibility.kueue.x-k8s.io` v1beta2 and v1beta1) as the Kubernetes
API server's aggregation layer asks for it: discovery, and a `PendingWorkloadsSummary` per
ClusterQueue or LocalQueue, from the same MUSTER_VISIBILITY bucket the gRPC Visibility API
reads (`gateway.visibility`: admission's positions; no second source of truth).

Answers as Kueue's visibility server gives them: `limit` (1000 when absent or 0) and `offset`
are bounded rather than refused (a negative limit: no items; a negative offset: 0), positions
are 0-based, a LocalQueue's positions count only its own workloads. Errors are Kubernetes
`Status` objects. Transport, authentication and authorization: `kube_visibility_server`.

Differs from Kueue: an item's metadata holds its name and namespace only (no
creationTimestamp or ownerReferences), because the bucket does not keep them; a name no queue
can have is 400 naming the path's field, not 404 (`_invalid_name`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from muster.api.quantity import shown
from muster.contracts.v1 import services_pb2
from muster.gateway.request_names import NAMESPACE, OBJECT_NAME
from muster.gateway.visibility import (
    MAX_LIMIT,
    UnknownQueueError,
    VisibilityStore,
    pending_workloads,
)

GROUP: Final = "visibility.kueue.x-k8s.io"
VERSIONS: Final = ("v1beta2", "v1beta1")  # preferred first
DEFAULT_LIMIT: Final = 1000  # Kueue's, when `limit` is absent or 0
_PATH = re.compile(
    rf"/apis/{re.escape(GROUP)}/(?P<version>[^/]+)"
    r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<plural>clusterqueues|localqueues)"
    r"/(?P<name>[^/]+)/pendingworkloads"
)


class Query(msgspec.Struct, frozen=True, kw_only=True):
    """One pendingworkloads GET: which queue, at which version, which page."""

    version: str
    plural: str  # "clusterqueues" or "localqueues"
    name: str
    namespace: str = ""  # a LocalQueue's
    offset: int = 0
    limit: int = DEFAULT_LIMIT

    @property
    def resource(self) -> str:
        return f"{self.plural}/pendingworkloads"


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """An HTTP status and the JSON object to send."""

    status: int
    body: dict[str, Any]


def query_of(path: str, params: Mapping[str, str]) -> Query | Answer | None:
    """The pendingworkloads query `path` asks for (an Answer when its parameters are bad), or
    None when it is not one (discovery, or unknown)."""
    match = _PATH.fullmatch(path)
    if match is None or match["version"] not in VERSIONS:
        return None
    namespaced = match["plural"] == "localqueues"
    if namespaced != (match["namespace"] is not None):
        return None
    if (invalid := _invalid_name(match["plural"], match["namespace"], match["name"])) is not None:
        return invalid
    numbers: dict[str, int] = {}
    for field in ("offset", "limit"):
        text = params.get(field, "")
        try:
            numbers[field] = int(text) if text else 0
        except ValueError:
            return status(400, "BadRequest", f"{field}: must be an integer, got {shown(text)}")
    limit = numbers["limit"] or DEFAULT_LIMIT
    return Query(
        version=match["version"],
        plural=match["plural"],
        name=match["name"],
        namespace=match["namespace"] or "",
        offset=max(numbers["offset"], 0),
        limit=min(max(limit, 0), MAX_LIMIT),
    )


def _invalid_name(plural: str, namespace: str | None, name: str) -> Answer | None:
    """400 naming the path's field when it holds a name no queue can have, else None.

    Differs from Kueue: its visibility server answers 404 for such a name; muster answers as
    its gRPC Visibility API does (request_names: INVALID_ARGUMENT naming the field), so a
    typo is not taken for a queue that is missing.
    """
    for field, value, problem_of in (("metadata.namespace", namespace, NAMESPACE),
                                     ("metadata.name", name, OBJECT_NAME)):  # fmt: skip
        if value is not None and (problem := problem_of(value)) is not None:
            cause = {"reason": "FieldValueInvalid", "message": problem, "field": field}
            message = f"{plural}.{GROUP} is invalid: {field}: {problem}"
            return status(400, "BadRequest", message, causes=[cause])
    return None


async def summary(store: VisibilityStore, query: Query) -> Answer:
    """The PendingWorkloadsSummary `query` asks for, or 404 for a queue that does not exist."""
    request = services_pb2.PendingWorkloadsRequest(offset=query.offset, limit=max(query.limit, 1))
    if query.plural == "clusterqueues":
        request.cluster_queue = query.name
    else:
        request.namespace, request.local_queue = query.namespace, query.name
    try:
        found = await pending_workloads(store, request)
    except UnknownQueueError:
        singular = query.plural.removesuffix("s")
        return status(404, "NotFound", f'{singular}.{GROUP} "{query.name}" not found')
    items = [_item(w) for w in found.items] if query.limit > 0 else []
    return Answer(
        status=200,
        body={
            "kind": "PendingWorkloadsSummary",
            "apiVersion": f"{GROUP}/{query.version}",
            "metadata": {},
            "items": items,
        },
    )


def _item(w: services_pb2.PendingWorkload) -> dict[str, Any]:
    return {
        "metadata": {"name": w.name, "namespace": w.namespace},
        "priority": w.priority,
        "localQueueName": w.local_queue,
        "positionInClusterQueue": w.position_in_cluster_queue,
        "positionInLocalQueue": w.position_in_local_queue,
    }


def discovery(path: str) -> Answer | None:
    """The discovery document at `path` (the group, or one version's resources), or None."""
    group_version = [{"groupVersion": f"{GROUP}/{v}", "version": v} for v in VERSIONS]
    if path in (f"/apis/{GROUP}", f"/apis/{GROUP}/"):
        body = {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": GROUP,
            "versions": group_version,
            "preferredVersion": group_version[0],
        }
        return Answer(status=200, body=body)
    if path == "/apis":
        group = {"name": GROUP, "versions": group_version, "preferredVersion": group_version[0]}
        return Answer(status=200, body={"kind": "APIGroupList", "apiVersion": "v1",
                                        "groups": [group]})  # fmt: skip
    version = path.removeprefix(f"/apis/{GROUP}/").rstrip("/")
    if version not in VERSIONS or path.rstrip("/") != f"/apis/{GROUP}/{version}":
        return None
    resources = [
        _resource(plural, kind, namespaced)
        for plural, namespaced in (("clusterqueues", False), ("localqueues", True))
        for kind in ("", "PendingWorkloadsSummary")
    ]
    body = {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{GROUP}/{version}",
        "resources": resources,
    }
    return Answer(status=200, body=body)


def _resource(plural: str, kind: str, namespaced: bool) -> dict[str, Any]:
    """A queue (`kind` "": the resource itself, which serves nothing but its subresource) or
    its pendingworkloads subresource."""
    own = plural.removesuffix("s")
    return {
        "name": f"{plural}/pendingworkloads" if kind else plural,
        "singularName": "" if kind else own,
        "namespaced": namespaced,
        "kind": kind or ("ClusterQueue" if plural == "clusterqueues" else "LocalQueue"),
        "verbs": ["get"] if kind else [],
    }


def status(
    code: int, reason: str, message: str, *, causes: list[dict[str, str]] | None = None
) -> Answer:
    """A Kubernetes `Status` failure; `causes` (each a field and its problem) in its details."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if causes:
        body["details"] = {"group": GROUP, "causes": causes}
    return Answer(status=code, body=body)


def forbidden(query: Query, user: str) -> Answer:
    """403 worded as the API server words an RBAC denial."""
    scope = f'in the namespace "{query.namespace}"' if query.namespace else "at the cluster scope"
    message = (
        f'{query.plural}.{GROUP} "{query.name}" is forbidden: User "{user}" cannot get '
        f'resource "{query.resource}" in API group "{GROUP}" {scope}'
    )
    return status(403, "Forbidden", message)
