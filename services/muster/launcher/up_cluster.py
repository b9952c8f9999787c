"""Which cluster `muster up` serves: the simulated one (its Nodes from `--nodes`), or the
Kubernetes API server the services' own flags name (`MUSTER_CLUSTER_BACKEND=kube` with
`MUSTER_KUBE_HOST`, a kubeconfig, ...), whose Nodes are what they are.

`up_backend()` reads the backend as the services will (the same flags and environment
variables, checked the same way); `kube_nodes()` asks that API server for its Nodes before any
service starts, so `muster up` says which server it uses and how many Nodes it sees, or why it
cannot reach it.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Final

from muster.bus.service import add_flags
from muster.cluster.choose import BACKEND_FLAGS, BackendConfig, backend_config
from muster.cluster.errors import ClusterError
from muster.cluster.kube.backend import KubeBackend
from muster.cluster.kube.settings import KubeConfig
from muster.launcher.nats_server import LaunchError

NODES_TIMEOUT_S: Final = 30.0  # for the API server to list its Nodes at start


def up_backend(cluster: str) -> BackendConfig:
    """The cluster backend the services of `cluster` will open, from the environment
    (MUSTER_CLUSTER_BACKEND, MUSTER_KUBE_*); ValueError naming the variable's flag when a
    value is invalid."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_flags(parser, BACKEND_FLAGS)
    try:
        args = parser.parse_args([])
    except argparse.ArgumentError as exc:  # a bad MUSTER_* value, as a service would say it
        raise ValueError(str(exc)) from None
    args.cluster = cluster
    return backend_config(args)


async def kube_nodes(config: KubeConfig) -> tuple[str, list[str]]:
    """The API server's URL and the names of its Nodes, sorted; LaunchError saying why when
    it cannot be reached or refuses."""
    try:
        backend = await KubeBackend.connect(config)
    except ClusterError as exc:
        raise LaunchError(f"MUSTER_CLUSTER_BACKEND=kube: {exc}") from None
    host = str(backend.transport.api.configuration.host) if backend.transport.api else "?"
    try:
        async with asyncio.timeout(NODES_TIMEOUT_S):
            nodes = await backend.list_nodes()
    except (ClusterError, TimeoutError) as exc:
        why = str(exc) or f"no answer in {NODES_TIMEOUT_S:g}s"
        raise LaunchError(
            f"the Kubernetes API server {host}: cannot list its Nodes: {why}"
        ) from None
    finally:
        await backend.close()
    return host, [n.name for n in nodes]
