"""Which cluster's configuration counts: each object is owned by the cluster that applied it.

Every cluster's watcher publishes the Kueue objects it sees on its own subjects, and admission
serves every cluster's queues (docs/multicluster.md). Without an owner, a worker cluster whose
own Kueue has a ClusterQueue of the manager's name (as MultiKueue workers usually do), or a
worker that lies, would rewrite or delete the manager's queues. So:

- an object (kind, name) is owned by the cluster whose `config.applied` of it was taken first;
  only that cluster may apply it again or delete it; a deletion frees the name;
- a cluster named by a MultiKueueCluster (a MultiKueue worker) changes nothing while it is
  declared one: muster's workers run what the manager admitted, they never admit, so their
  queues mean nothing to admission. What it applied before it was declared stays until another
  cluster applies that object (the manager's watcher, started later), which then owns it;
- which cluster is the MultiKueue manager is configuration of the installation, not
  first-come: the cluster id admission and the gateway run with (`--cluster`; they run in the
  manager). A MultiKueueCluster counts only from the manager, so a worker cannot declare the
  manager (or another worker) a worker, whichever watcher's event was stored first; one naming
  the manager itself is refused too (the manager would freeze its own configuration);
- Namespaces are no one's: each cluster has its own (dispatch asks whether a worker has the
  workload's namespace), so they are left out of this rule and kept apart by cluster
  (`config_key`; the engine's `Configuration.namespaces`).

Pure and replayable: the answer is a function of the events taken so far, in stream order, so
a rebuild from the stream or from a snapshot (which keeps each object's last event taken) comes
to the same owners. Differs from Kueue, which reads each cluster's API server on its own and
has no shared stream to guard.
"""

from __future__ import annotations

from typing import Final

from muster.api.wellknown import LOCAL_CLUSTER

# A LimitRange or a RuntimeClass, as a Namespace, is each cluster's own: it bounds or costs
# the pods of that cluster.
UNOWNED_KINDS: Final = frozenset({"Namespace", "LimitRange", "RuntimeClass"})
NAMESPACED_CONFIG_KINDS: Final = frozenset({"LocalQueue", "LimitRange"})  # named "<ns>/<name>"
WORKER_KIND: Final = "MultiKueueCluster"  # its name is the worker's cluster id


def config_key(kind: str, name: str, cluster: str) -> tuple[str, str]:
    """Which object a configuration event of `cluster` is about: (kind, name), but for a
    Namespace (kind, "<cluster>/<name>"): each cluster's is its own, so keeping one event per
    key (admission's snapshot log) keeps every cluster's. A cluster id has no "/"."""
    return (kind, f"{cluster}/{name}") if kind in UNOWNED_KINDS else (kind, name)


class ConfigOwners:
    """The owner of each configuration object, and the clusters declared MultiKueue workers."""

    def __init__(self, *, manager: str = LOCAL_CLUSTER) -> None:
        self.manager = manager  # the one cluster whose MultiKueueClusters count
        self.owners: dict[tuple[str, str], str] = {}  # (kind, name) -> cluster
        self.workers: set[str] = set()

    def refusal(self, kind: str, name: str, cluster: str, *, deleted: bool = False) -> str:
        """Why `cluster` may not apply (or delete) `kind` `name` now; "" when it may.

        An event of no known cluster (a test, a tool writing no cluster) is taken as before."""
        if kind in UNOWNED_KINDS or not cluster:
            return ""
        owner = self.owners.get((kind, name))
        verb = "deleting" if deleted else "applying"
        what = f"{kind} {name}: {verb} it from cluster {cluster} is refused"
        if cluster in self.workers:
            if deleted and owner is None:
                return ""  # deletes nothing
            return (
                f"{what}: {cluster} is a MultiKueue worker (a MultiKueueCluster names it); "
                "a worker's own queues do not configure admission"
            )
        if kind == WORKER_KIND:
            if cluster != self.manager:
                if deleted and owner is None:
                    return ""  # deletes nothing
                return (
                    f"{what}: only the MultiKueue manager's MultiKueueClusters count, and "
                    f"{cluster} is not the manager ({self.manager}: admission's --cluster)"
                )
            if name == cluster and not deleted:
                return (
                    f"{what}: it names cluster {cluster} itself as a MultiKueue worker, which "
                    "would leave that cluster's own configuration (this one included) unchangeable"
                )
        if owner is None or owner == cluster:
            return ""
        if owner in self.workers and not deleted:
            return ""  # applied by a cluster declared a worker since: passes to this one
        return f"{what}: cluster {owner} applied it first and owns it"

    def take(self, kind: str, name: str, cluster: str, *, deleted: bool = False) -> None:
        """Record an event `refusal` allowed; call in stream order."""
        if kind in UNOWNED_KINDS:
            return
        if deleted:
            self.owners.pop((kind, name), None)
        elif cluster:
            self.owners[(kind, name)] = cluster
        if kind == WORKER_KIND:
            if deleted:
                self.workers.discard(name)
            else:
                self.workers.add(name)

    def admit(self, kind: str, name: str, cluster: str, *, deleted: bool = False) -> str:
        """`refusal`, and `take` when there is none."""
        refused = self.refusal(kind, name, cluster, deleted=deleted)
        if not refused:
            self.take(kind, name, cluster, deleted=deleted)
        return refused
