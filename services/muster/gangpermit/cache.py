"""Gang-permit's view of the simulated cluster, kept up to date from one watch of its store.

A pass over waiting gangs needs every node and every pod. Listing them reads each object from
the store (one request per pod) and parses it again, on every pass; this cache parses each
object once per change and keeps what bound pods use per node as they change, so a pass costs
one request: `sync` asks the store for its latest revision and waits until the watch has read
that far. A pass thus sees at least every write made before it began, as a listing would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from muster.cluster.errors import ClusterError
from muster.cluster.objects import NodeView, PodView, node_view, pod_view
from muster.cluster.sim.keys import NODE_PREFIX, POD_PREFIX
from muster.cluster.sim.store import SimStore, StoreChange
from muster.core.gang import ONE_POD, PODS, NodeCapacity, PodKey
from muster.gangpermit.snapshot import TERMINAL_PHASES, capacities_from_usage, pod_key

log = logging.getLogger(__name__)

_RETRY_S = 1.0  # a watch that failed is resumed after this long


class ClusterCache:
    """Nodes and pods of one simulated cluster, as of the last write its watch has read.

    Run `run()` in a task; `on_change` is called after each change to a node or pod (the
    service wakes its pass loop with it).
    """

    def __init__(self, store: SimStore, *, on_change: Callable[[], None] = lambda: None) -> None:
        self._store = store
        self._on_change = on_change
        self._nodes: dict[str, NodeView] = {}  # by store key
        self._pods: dict[str, PodView] = {}  # by store key
        self.pods: dict[PodKey, PodView] = {}  # by "<namespace>/<name>"
        self._used: dict[str, Counter[str]] = {}  # node name -> requests of bound, live pods
        self.revision = 0  # the last store write the watch has read
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []  # (revision, woken there)

    async def run(self) -> None:
        """Follow the store until cancelled; a failed watch resumes after the last revision."""
        while True:
            changes = self._store.watch(from_revision=self.revision, on_skipped=self._read_up_to)
            try:
                async with contextlib.aclosing(changes):
                    async for change in changes:
                        self._apply(change)
                        self._read_up_to(change.revision)
            except ClusterError as err:
                log.warning("cluster watch failed, resuming: %s", err)
                await asyncio.sleep(_RETRY_S)

    async def sync(self, *, timeout_s: float = 5.0) -> None:
        """Return once the cache holds every write stored before this call (ClusterError if the
        watch does not get there within `timeout_s`)."""
        target = await self._store.last_revision()
        if self.revision >= target:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((target, waiter))
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            raise ClusterError(
                "",
                "Unavailable",
                f"cluster watch at revision {self.revision}, behind {target} after {timeout_s:g}s",
                temporary=True,
            ) from None
        finally:
            if (target, waiter) in self._waiters:
                self._waiters.remove((target, waiter))

    def nodes(self) -> list[NodeView]:
        """Every node, sorted by name (as `ClusterBackend.list_nodes`)."""
        return sorted(self._nodes.values(), key=lambda v: v.name)

    def capacities(self) -> tuple[NodeCapacity, ...]:
        """`snapshot.node_capacities(nodes, pods)`, from the usage kept up to date here."""
        return capacities_from_usage(self.nodes(), self._used)

    def _read_up_to(self, revision: int) -> None:
        if revision <= self.revision:
            return
        self.revision = revision
        if self._waiters:
            done = [(r, w) for r, w in self._waiters if r <= revision]
            for item in done:
                self._waiters.remove(item)
                if not item[1].done():
                    item[1].set_result(None)

    def _apply(self, change: StoreChange) -> None:
        key = change.key
        if key.startswith(POD_PREFIX):
            self._forget_pod(key)
            if change.type != "DELETED":
                pod = _view(pod_view, key, change.obj)
                if pod is not None:
                    self._add_pod(key, pod)
        elif key.startswith(NODE_PREFIX):
            self._nodes.pop(key, None)
            if change.type != "DELETED":
                node = _view(node_view, key, change.obj)
                if node is not None:
                    self._nodes[key] = node
        else:
            return
        self._on_change()

    def _add_pod(self, key: str, pod: PodView) -> None:
        self._pods[key] = pod
        self.pods[pod_key(pod.namespace, pod.name)] = pod
        if pod.node_name and pod.phase not in TERMINAL_PHASES:
            used = self._used.setdefault(pod.node_name, Counter())
            used.update(pod.requests)
            used[PODS] += ONE_POD

    def _forget_pod(self, key: str) -> None:
        pod = self._pods.pop(key, None)
        if pod is None:
            return
        self.pods.pop(pod_key(pod.namespace, pod.name), None)
        if pod.node_name and pod.phase not in TERMINAL_PHASES:
            used = self._used[pod.node_name]
            used.subtract(pod.requests)
            used[PODS] -= ONE_POD
            for resource in [r for r, amount in used.items() if amount == 0]:
                del used[resource]
            if not used:
                del self._used[pod.node_name]


def _view(parse: Callable[[Mapping[str, Any]], Any], key: str, obj: Mapping[str, Any]) -> Any:
    """The view of one stored object; one that will not decode is logged and left out."""
    try:
        return parse(obj)
    except msgspec.ValidationError as exc:
        log.warning("skipping undecodable object", extra={"key": key, "error": str(exc)})
        return None
