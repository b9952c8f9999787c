"""Gang sources to the placement core's inputs, in one import for their callers.

Four sources make gangs (issues 4 and 14): the Workload API (`spec.workloadRef`),
scheduler-plugins' PodGroup (label `scheduling.x-k8s.io/pod-group`), a Kueue-admitted Workload
or Job (label `muster.dev/workload`, `gang_of_admitted`), and today's gang API
(`spec.schedulingGroup`, maybe under CompositePodGroups, `group_member`). Which gang a pod
joins is `membership`'s; the objects as `NodeInfo` and `PodInfo` are `inputs`'; an admitted
workload's gang is `admitted`'s. Pure functions of decoded api objects, called by the
gangpermit service and the simulator alike.
"""

from __future__ import annotations

from muster.api.wellknown import SCHEDULER_NAME
from muster.core.placement.admitted import (
    AdmittedGang,
    gang_of_admitted,
    pods_to_create,
    topology_of,
)
from muster.core.placement.inputs import (
    created_at_s,
    handled_by,
    node_info,
    pod_info,
    pod_topology,
    priority_of,
    resolve_priority,
)
from muster.core.placement.membership import (
    NO_GROUPS,
    GroupIndex,
    Membership,
    group_member,
    membership,
)

__all__ = [
    "NO_GROUPS",
    "SCHEDULER_NAME",
    "AdmittedGang",
    "GroupIndex",
    "Membership",
    "created_at_s",
    "gang_of_admitted",
    "group_member",
    "handled_by",
    "membership",
    "node_info",
    "pod_info",
    "pod_topology",
    "pods_to_create",
    "priority_of",
    "resolve_priority",
    "topology_of",
]
