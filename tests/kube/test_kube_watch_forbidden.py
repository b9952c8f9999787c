"""A watch whose ServiceAccount lacks a rule, as after an upgrade that reads a new kind (the
LimitRanges) but before its ClusterRole was applied: the watcher stops with an error naming
the rule to add, never watches on without that kind (its workloads would be charged without
their LimitRanges' defaults, silently). With k8s/rbac/watcher.yaml as shipped it watches."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest
from kube_access_helpers import ACCOUNTS, kubeconfig, role_grants
from kube_backend_helpers import fast_config

from muster.cluster.errors import ClusterError
from muster.cluster.kube import KubeBackend
from muster.devtools.apiserver import ApiServer
from muster.devtools.apiserver.access import Access

pytestmark = pytest.mark.timeout(30)


def _watcher_access(*, without: str = "") -> Access:
    """The watcher's ClusterRole as k8s/rbac/watcher.yaml has it, less resource `without`."""
    grants = [
        msgspec.structs.replace(g, resources=g.resources - {without})
        for g in role_grants("watcher")
    ]
    return Access(tokens={t: user for t, user in ACCOUNTS.values()}, grants=grants)


async def _first_listing(tmp_path: Path, access: Access) -> None:
    """Watch as the watcher until every source has listed once (or the watch fails)."""
    async with ApiServer(access=access) as server:
        path = kubeconfig(tmp_path, server.url, "watcher")
        backend = await KubeBackend.connect(fast_config(server.url, kubeconfig=str(path)))
        listed = asyncio.Event()

        async def follow() -> None:
            async for _ in backend.watch(on_listed=listed.set):
                pass

        watching = asyncio.create_task(follow())
        waiting = asyncio.create_task(listed.wait())
        try:
            await asyncio.wait({watching, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if watching.done():
                watching.result()  # its error
        finally:
            for task in (watching, waiting):
                task.cancel()
            await asyncio.gather(watching, waiting, return_exceptions=True)
            await backend.close()


async def test_a_watcher_without_the_limit_range_rule_stops_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as stopped:
        await _first_listing(tmp_path, _watcher_access(without="limitranges"))
    assert (stopped.value.obj, stopped.value.reason) == ("limitranges.core", "Forbidden")
    assert stopped.value.temporary is False
    assert stopped.value.message == (
        'limitranges is forbidden: User "system:serviceaccount:muster:muster-watcher" cannot '
        'list resource "limitranges" in API group "" at the cluster scope; this service cannot '
        'run without it: add the rule {apiGroups: [""], resources: ["limitranges"], verbs: '
        '["list", "watch"]} to its ServiceAccount\'s ClusterRole (k8s/rbac/ has muster\'s), '
        "then start it again"
    )


async def test_the_shipped_watcher_role_lists_every_source(tmp_path: Path) -> None:
    await _first_listing(tmp_path, _watcher_access())


async def test_a_watcher_without_the_runtime_class_rule_stops_naming_it(tmp_path: Path) -> None:
    """Without it, workloads naming a RuntimeClass would be held as naming a missing one."""
    with pytest.raises(ClusterError) as stopped:
        await _first_listing(tmp_path, _watcher_access(without="runtimeclasses.node.k8s.io"))
    assert (stopped.value.obj, stopped.value.reason) == ("runtimeclasses.node.k8s.io", "Forbidden")
    assert stopped.value.message.endswith(
        'add the rule {apiGroups: ["node.k8s.io"], resources: ["runtimeclasses"], verbs: '
        '["list", "watch"]} to its ServiceAccount\'s ClusterRole (k8s/rbac/ has muster\'s), '
        "then start it again"
    )
