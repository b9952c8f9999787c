"""muster.cluster: the ClusterBackend seam (`backend`), the keys its changes name objects by
(`keys`), node and pod views (`objects`), the errors every backend raises (`errors`), the
simulated cluster (`sim`), a real one through the official client (`kube`), and the service
flags that choose between them (`choose`). The two backends never import each other.
"""

from muster.cluster.backend import (
    ChangeType,
    ClusterBackend,
    ClusterChange,
    PodSetStart,
    Selection,
)
from muster.cluster.errors import (
    BindConflictError,
    ClusterError,
    ConflictError,
    InvalidObjectError,
    NotFoundError,
    RequestsRefusedError,
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
    "RequestsRefusedError",
    "Selection",
    "node_view",
    "pod_view",
]
