"""muster.cluster: the ClusterBackend seam (`backend`), node and pod views (`objects`), the errors
every backend raises (`errors`), and the simulated cluster (`sim`). A `kube` backend (the
official client) implements the same protocol.
"""

from muster.cluster.backend import ChangeType, ClusterBackend, ClusterChange, PodSetStart
from muster.cluster.errors import (
    BindConflictError,
    ClusterError,
    ConflictError,
    InvalidObjectError,
    NotFoundError,
)
from muster.cluster.objects import (
    POD_SET_ANNOTATION,
    RUN_SECONDS_ANNOTATION,
    SCHEDULER_NAME,
    WORKLOAD_LABEL,
    NodeView,
    PodView,
    node_view,
    pod_view,
)

__all__ = [
    "POD_SET_ANNOTATION",
    "RUN_SECONDS_ANNOTATION",
    "SCHEDULER_NAME",
    "WORKLOAD_LABEL",
    "BindConflictError",
    "ChangeType",
    "ClusterBackend",
    "ClusterChange",
    "ClusterError",
    "ConflictError",
    "InvalidObjectError",
    "NodeView",
    "NotFoundError",
    "PodSetStart",
    "PodView",
    "node_view",
    "pod_view",
]
