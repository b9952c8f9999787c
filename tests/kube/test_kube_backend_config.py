"""KubeConfig: how the backend finds the API server, and the options that change what it
watches and writes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from kube_backend_helpers import ChangeLog, backend_for, node, pod
from kube_helpers import cluster_queue

from muster.cluster.errors import ClusterError
from muster.cluster.kube import KubeBackend, KubeConfig
from muster.devtools.apiserver import ApiServer

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    async with ApiServer(bookmark_interval_s=0.05) as running:
        yield running


async def test_a_kubeconfig_file_names_the_server(server: ApiServer, tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server.url}}],
                "users": [{"name": "u", "user": {"token": "secret"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    backend = await KubeBackend.connect(KubeConfig(kubeconfig=str(path)))
    try:
        await backend.apply(node("n1"))
        assert [n.name for n in await backend.list_nodes()] == ["n1"]
    finally:
        await backend.close()


async def test_no_configuration_is_a_permanent_cluster_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ClusterError) as in_cluster:
        await KubeBackend.connect(KubeConfig(in_cluster=True))
    assert (in_cluster.value.reason, in_cluster.value.temporary) == ("Unconfigured", False)
    with pytest.raises(ClusterError):
        await KubeBackend.connect(KubeConfig(kubeconfig=str(tmp_path / "absent")))


def test_invalid_options_are_named() -> None:
    config = KubeConfig(kueue_version="v2", write_burst=0, in_cluster=True, kubeconfig="x")
    assert [p.split(":")[0] for p in config.problems()] == [
        "kueue_version",
        "write_burst",
        "in_cluster",
    ]


async def test_the_scheduler_name_chooses_the_pods_watched(server: ApiServer) -> None:
    async with backend_for(server, scheduler_name="batch-scheduler") as backend:
        await backend.apply(pod("ours", scheduler="batch-scheduler"))
        await backend.apply(pod("muster-default", scheduler="muster"))
        async with ChangeLog(backend) as log:
            await log.wait_key("pod.default.ours", "ADDED")
            await log.barrier(server, backend)
        assert "pod.default.muster-default" not in {c.key for c in log.changes}


async def test_the_kueue_version_is_the_one_read(server: ApiServer) -> None:
    async with backend_for(server, kueue_version="v1beta2") as backend:
        await backend.apply(cluster_queue("cq"))
        async with ChangeLog(backend) as log:
            shown = await log.wait_key("obj.ClusterQueue._.cq", "ADDED")
            await log.barrier(server, backend)  # every source has listed
        assert shown.obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        assert server.requests.count(verb="list", path="/kueue.x-k8s.io/v1beta2/") == 9
