"""`--authorization kube`: each `Action` becomes a SubjectAccessReview, so the RBAC that guards
kubectl guards muster too: submitting a Job into `ml` needs `create jobs` in `ml`.

| action                            | asked of the API server                                   |
|-----------------------------------|-----------------------------------------------------------|
| submit a Job, Workload, Pod, gang | create jobs.batch, workloads.kueue.x-k8s.io, pods, ...    |
|                                   | in its namespace                                          |
| create_queue                      | create localqueues.kueue.x-k8s.io in its namespace        |
| a cluster-scoped object           | create that resource (clusterqueues, nodes, ...)          |
| choose cluster id X               | use clusters.muster.dev named X                           |
| watch a namespace                 | watch workloads.kueue.x-k8s.io in it                      |
| watch one LocalQueue              | that, or get localqueues.kueue.x-k8s.io of that name      |
| watch every namespace             | watch workloads.kueue.x-k8s.io in all namespaces          |
| cancel                            | delete workloads.kueue.x-k8s.io in its namespace          |

Members of `muster:admins` (the legacy token) are admins without asking.
"""

from __future__ import annotations

from typing import Final

from muster.cluster.errors import ClusterError
from muster.cluster.kube.reviews import ResourceAttributes, Reviews
from muster.gateway.permissions import ALL_NAMESPACES, CLUSTER_KIND, Action, Caller, Permission

KUEUE: Final = "kueue.x-k8s.io"
# Submitted kind → (API group, resource).
RESOURCES: Final[dict[str, tuple[str, str]]] = {
    "Job": ("batch", "jobs"),
    "Workload": (KUEUE, "workloads"),
    "Pod": ("", "pods"),
    "Workload.scheduling.k8s.io": ("scheduling.k8s.io", "workloads"),
    "PodGroup": ("scheduling.x-k8s.io", "podgroups"),
    "LocalQueue": (KUEUE, "localqueues"),
    "ClusterQueue": (KUEUE, "clusterqueues"),
    "ResourceFlavor": (KUEUE, "resourceflavors"),
    "Cohort": (KUEUE, "cohorts"),
    "WorkloadPriorityClass": (KUEUE, "workloadpriorityclasses"),
    "AdmissionCheck": (KUEUE, "admissionchecks"),
    "MultiKueueConfig": (KUEUE, "multikueueconfigs"),
    "MultiKueueCluster": (KUEUE, "multikueueclusters"),
    "PriorityClass": ("scheduling.k8s.io", "priorityclasses"),
    "Namespace": ("", "namespaces"),
    "LimitRange": ("", "limitranges"),
    "RuntimeClass": ("node.k8s.io", "runtimeclasses"),
    "Node": ("", "nodes"),
    CLUSTER_KIND: ("muster.dev", "clusters"),
}


class AuthorizationUnavailableError(Exception):
    """The API server could not be asked; the call fails with UNAVAILABLE."""


def review_of(action: Action) -> list[ResourceAttributes]:
    """The reviews that answer `action`, any one of which allows it (none: denied)."""
    if action.permission is Permission.WATCH:
        everywhere = action.namespace == ALL_NAMESPACES
        namespace = "" if everywhere else action.namespace
        reviews = [
            ResourceAttributes(verb="watch", group=KUEUE, resource="workloads", namespace=namespace)
        ]
        if action.local_queue:
            reviews.append(
                ResourceAttributes(
                    verb="get",
                    group=KUEUE,
                    resource="localqueues",
                    namespace=namespace,
                    name=action.local_queue,
                )
            )
        return reviews
    if action.permission is Permission.CANCEL:
        return [
            ResourceAttributes(
                verb="delete", group=KUEUE, resource="workloads", namespace=action.namespace
            )
        ]
    found = RESOURCES.get(action.resource_kind or action.kind)
    if found is None:
        return []
    group, resource = found
    choosing = action.kind == CLUSTER_KIND  # RBAC can name the cluster ids one may use
    verb, name = ("use", action.name) if choosing else ("create", "")
    namespace = action.namespace if action.permission is not Permission.ADMIN else ""
    return [
        ResourceAttributes(
            verb=verb, group=group, resource=resource, namespace=namespace, name=name
        )
    ]


class KubeAuthorizer:
    """Answers with SubjectAccessReviews (cached by `Reviews`)."""

    def __init__(self, reviews: Reviews) -> None:
        self._reviews = reviews

    async def allowed(self, caller: Caller, action: Action) -> bool:
        if caller.is_admin:
            return True
        try:
            for attributes in review_of(action):
                if await self._reviews.may(caller.user, caller.groups, attributes):
                    return True
        except ClusterError as exc:
            raise AuthorizationUnavailableError(f"SubjectAccessReview: {exc.message}") from None
        return False
