"""How `KubeBackend` reaches the API server and paces itself: `KubeConfig`, validated once by
the caller, and `api_client`, which turns it into the official asyncio client.

The server is an explicit `host` (tests: "http://127.0.0.1:PORT"), the in-cluster service
account, or a kubeconfig file (default `~/.kube/config` or `$KUBECONFIG`).
"""

from __future__ import annotations

import msgspec
from kubernetes.aio.client import ApiClient, Configuration
from kubernetes.aio.config import ConfigException, load_incluster_config, load_kube_config

from muster.api.wellknown import SCHEDULER_NAME
from muster.cluster.errors import ClusterError
from muster.cluster.kube.informer import WatchSettings
from muster.cluster.kube.transport import Backoff

KUEUE_VERSIONS = ("v1beta1", "v1beta2")


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


async def api_client(config: KubeConfig) -> ApiClient:
    """The official asyncio client for `config`; raises ClusterError when it cannot be made."""
    configuration = Configuration()
    try:
        if config.in_cluster:
            load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]  # unhinted
        elif config.kubeconfig or not config.host:
            await load_kube_config(  # type: ignore[no-untyped-call]  # unhinted
                config_file=config.kubeconfig or None,
                context=config.context or None,
                client_configuration=configuration,
            )
    except (ConfigException, OSError) as err:
        raise ClusterError(
            "", "Unconfigured", f"no Kubernetes client configuration: {err}"
        ) from err
    if config.host:
        configuration.host = config.host.rstrip("/")
    return ApiClient(configuration)
