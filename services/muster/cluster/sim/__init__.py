"""muster.cluster.sim: a simulated cluster in KV bucket `MUSTER_SIM_<cluster>`.

`SimStore` is its API server (objects as Kubernetes-shaped JSON; keys in `keys`), `SimBackend`
its ClusterBackend, `Kubelet` runs its pods (`muster service sim-cluster`), and `clock` holds
the wall clock and the manual clock tests drive.
"""

from muster.cluster.keys import bucket_name, node_key, object_key, pod_key
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.clock import Clock, ManualClock, WallClock
from muster.cluster.sim.kubelet import Kubelet
from muster.cluster.sim.store import SimStore, StoreChange, StoredObject

__all__ = [
    "Clock",
    "Kubelet",
    "ManualClock",
    "SimBackend",
    "SimStore",
    "StoreChange",
    "StoredObject",
    "WallClock",
    "bucket_name",
    "node_key",
    "object_key",
    "pod_key",
]
