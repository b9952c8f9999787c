"""What the Kubernetes backend is configured with: plain settings, no client.

Services choose their backend from flags before knowing whether they run on Kubernetes, so the
settings import nothing of the official client (which takes a few tenths of a second).
"""

from __future__ import annotations

import msgspec

from muster.api.wellknown import SCHEDULER_NAME
from muster.cluster.kube.retry import Backoff

KUEUE_VERSIONS = ("v1beta1", "v1beta2")


class WatchSettings(msgspec.Struct, frozen=True, kw_only=True):
    page_size: int = 500  # list pages (limit/continue)
    timeout_s: float = 300.0  # server-side watch timeout, randomized up to twice this
    missing_retry_s: float = 30.0  # how often a resource that is not served is tried again
    backoff: Backoff = Backoff(initial_s=0.2, max_s=10.0)
    queue_size: int = 10_000  # changes read ahead of the consumer


class StatusWriterSettings(msgspec.Struct, frozen=True, kw_only=True):
    qps: float = 20.0  # status writes per second; <= 0: unlimited
    burst: int = 40
    concurrency: int = 4  # writes in flight at once
    backoff: Backoff = Backoff(initial_s=0.2, max_s=10.0)


class KubeConfig(msgspec.Struct, frozen=True, kw_only=True):
    host: str = ""  # overrides the kubeconfig's server
    kubeconfig: str = ""  # path; "" reads $KUBECONFIG or ~/.kube/config
    context: str = ""  # kubeconfig context; "" is its current one
    in_cluster: bool = False  # the pod's service account instead of a kubeconfig
    write_qps: float = 50.0  # writes per second (create, update, bind, delete); <= 0: unlimited
    write_burst: int = 100
    scheduler_name: str = SCHEDULER_NAME  # pods muster places name it in spec.schedulerName
    kueue_version: str = "v1beta1"  # the kueue.x-k8s.io version read and written
    request_timeout_s: float = 30.0
    watch: WatchSettings = WatchSettings()
    retry: Backoff = Backoff()  # temporary failures of one write, before ClusterError

    def problems(self) -> list[str]:
        """One line per invalid field (empty: valid)."""
        out = []
        if self.kueue_version not in KUEUE_VERSIONS:
            out.append(f"kueue_version: must be one of {', '.join(KUEUE_VERSIONS)}")
        if self.write_qps > 0 and self.write_burst < 1:
            out.append(f"write_burst: must be >= 1, got {self.write_burst}")
        if self.in_cluster and self.kubeconfig:
            out.append("in_cluster: cannot be combined with kubeconfig")
        if not self.scheduler_name:
            out.append("scheduler_name: is required")
        return out


class WorkerSource(msgspec.Struct, frozen=True, kw_only=True):
    """Which MultiKueueCluster this service serves, where its Secrets are, and how often its
    kubeconfig is read again."""

    cluster: str
    namespace: str = "muster"
    refresh_s: float = 10.0
