"""kueuectl's stop, resume and delete on Kubernetes: written into the API server as the caller,
as kueuectl itself writes them, so the watcher publishes what changed exactly as after a
`kubectl patch` (a Workload's `spec.active`, a queue's `spec.stopPolicy`, a deletion).

The gateway's own permission check comes first (`workload_rpcs`); the API server then checks
the caller's RBAC through impersonation. Deleting a Job's workload deletes the Job, as
kueuectl does (its Workload goes with it); any other workload's Kueue Workload is deleted.
"""

from __future__ import annotations

from typing import Final

from muster.cluster.errors import ClusterError
from muster.cluster.kube.backend import KubeBackend
from muster.gateway.book import Entry
from muster.gateway.control import CLUSTER_QUEUE, DELETE, NONE, RESUME, STOP, WORKLOAD
from muster.gateway.kube_submit import SubmitRefusedError, identity_of, refusal_code
from muster.gateway.permissions import Caller

_JOB: Final = "Job"


async def control_workload(backend: KubeBackend, entry: Entry, verb: str, caller: Caller) -> None:
    """Stop (spec.active false), resume (true) or delete `entry`'s workload as `caller`."""
    namespace, _, name = entry.key.partition("/")
    as_user = identity_of(caller)
    try:
        if verb == DELETE:
            owner = entry.summary
            if owner.owner_kind == _JOB and owner.owner_name:
                await backend.delete(_JOB, owner.owner_name, namespace=namespace, as_user=as_user)
            else:
                await backend.delete(WORKLOAD, name, namespace=namespace, as_user=as_user)
            return
        active = {"spec": {"active": verb == RESUME}}
        await backend.merge_patch(WORKLOAD, name, active, namespace=namespace, as_user=as_user)
    except ClusterError as err:
        raise refused(err) from err


async def control_queue(
    backend: KubeBackend, kind: str, key: str, verb: str, policy: str, caller: Caller
) -> None:
    """Set a LocalQueue's or ClusterQueue's `spec.stopPolicy` (`policy`; None to resume)."""
    namespace, name = ("", key) if kind == CLUSTER_QUEUE else key.split("/", 1)
    stop_policy = NONE if verb != STOP else policy
    try:
        await backend.merge_patch(
            kind,
            name,
            {"spec": {"stopPolicy": stop_policy}},
            namespace=namespace,
            as_user=identity_of(caller),
        )
    except ClusterError as err:
        raise refused(err) from err


def refused(err: ClusterError) -> SubmitRefusedError:
    code = refusal_code(err, not_found="NOT_FOUND")
    return SubmitRefusedError(code, f"{err}; retry" if code == "UNAVAILABLE" else str(err))
