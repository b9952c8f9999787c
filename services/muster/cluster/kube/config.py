"""How `KubeBackend` reaches the API server: `api_client` turns a `KubeConfig` (settings.py,
validated once by the caller) into the official asyncio client.

The server is an explicit `host` (tests: "http://127.0.0.1:PORT"), the in-cluster service
account, or a kubeconfig file (default `~/.kube/config` or `$KUBECONFIG`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from muster.cluster.errors import ClusterError
from muster.cluster.kube.settings import KubeConfig

if TYPE_CHECKING:
    from kubernetes.aio.client import ApiClient


async def api_client(config: KubeConfig) -> ApiClient:
    """The official asyncio client for `config`; raises ClusterError when it cannot be made."""
    # Imported here: services on the simulated cluster never make a client (settings.py).
    from kubernetes.aio.client import ApiClient, Configuration
    from kubernetes.aio.config import ConfigException, load_incluster_config, load_kube_config

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
