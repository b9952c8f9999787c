"""The ClusterBackend seam: what the watcher, gang-permit and the binder need from a cluster.

Two implementations: `muster.cluster.sim.SimBackend` (objects in a NATS KV bucket, pods run by
the sim kubelet) and `muster.cluster.kube.KubeBackend` (the official client). Every failure is
raised as a `ClusterError`, so nothing outside `muster.cluster` catches a nats or kubernetes
error.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, Protocol

import msgspec

from muster.api.model import Toleration
from muster.cluster.errors import ClusterError
from muster.cluster.objects import ADMISSION_LABEL as ADMISSION_LABEL
from muster.cluster.objects import NodeView, PodView
from muster.cluster.objects import admission_of as admission_of

ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]

# What a watch follows. "workloads": what the watcher reports (configuration, queued Jobs, Kueue
# Workloads, muster's pods, nodes, gangs). "placement": what gang placement needs (nodes, the
# pods muster places and every pod bound to a node, whoever bound it, gangs, priorities).
Selection = Literal["workloads", "placement"]


class ClusterChange(msgspec.Struct, frozen=True, kw_only=True):
    """One change of one cluster object, as `ClusterBackend.watch` yields it.

    `obj` is the whole object as stored (Kubernetes-shaped JSON); for DELETED it is the object's
    last state. `revision` increases strictly along one watch.
    """

    kind: str  # "Node", "Pod", or the applied object's kind: "ClusterQueue", "Job", ...
    type: ChangeType
    key: str  # the object's key: node.<name>, pod.<ns>.<name>, obj.<kind>.<ns|_>.<name>
    obj: dict[str, Any]
    revision: int


class Identity(msgspec.Struct, frozen=True, kw_only=True):
    """Whom a write is made for: the user who submitted it through the gateway.

    On Kubernetes the write is made as them (impersonation), so RBAC, Pod Security Admission,
    quotas and webhooks judge the user instead of muster; the simulated cluster has no access
    control and ignores it.
    """

    user: str
    groups: tuple[str, ...] = ()


class PodSetStart(msgspec.Struct, frozen=True, kw_only=True):
    """How to start one podset of an admitted workload: what the binder passes to start_workload.

    `requests` are per pod, in milli-units. `node_selector` and `tolerations` are the podset's
    own merged with what the assigned flavors inject (WorkloadAdmitted's placement hints).
    `annotations` go onto every pod (the pod template's; `muster.dev/run-seconds` among them
    when the binder knows it), and `labels` too (an admission check's podSetUpdates).
    `routed`: the workload was routed to an alternative (docs/routing.md), and `requests` are
    the alternative's as admission charged them, what a pod requests in all (its overhead
    included); otherwise they are the pod template's own, and its pods are made as written.
    """

    name: str
    count: int
    requests: Mapping[str, int]
    node_selector: Mapping[str, str] = msgspec.field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    routed: bool = False


class WorkloadCopy(NamedTuple):
    """A copy in this cluster of a workload submitted in another (MultiKueue): the
    workload's key there, and that cluster."""

    workload: str
    origin: str


class WorkloadOrigin(msgspec.Struct, frozen=True, kw_only=True):
    """Where an admitted workload was submitted when that is another cluster, and what to
    copy from there: the Kueue Workload as submitted, and the Job it stands for (if any)."""

    cluster: str
    workload_json: str
    owner_json: str = ""

    def workload(self) -> dict[str, Any]:
        return _object(self.workload_json)

    def owner(self) -> dict[str, Any] | None:
        return _object(self.owner_json) if self.owner_json else None


def _object(text: str) -> dict[str, Any]:
    """A manifest carried by an event; ClusterError (permanent) when it is not an object."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ClusterError("", "Invalid", f"an undecodable manifest: {err}") from None
    if not isinstance(value, dict):
        raise ClusterError("", "Invalid", "a manifest that is not an object")
    return value


class ClusterBackend(Protocol):
    """A cluster as muster's per-cluster services see it. Every method may raise ClusterError."""

    async def apply(self, manifest: Mapping[str, Any], *, as_user: Identity | None = None) -> None:
        """Create `manifest`, or replace the stored object of the same kind, namespace and name.

        Any kind: Nodes, Pods, Kueue objects, Jobs, Workloads. Server-set fields (uid,
        creationTimestamp) are kept across a replace, and so is `status` when the manifest has
        none. A namespaced kind without a namespace goes to "default". Raises InvalidObjectError
        for a Node or Pod that would not decode (bad quantity, wrong type), naming every field.
        With `as_user`, every request of the write is made as that user (`Identity`); a
        refusal is a ClusterError with reason "Forbidden".
        """
        ...

    async def create(self, manifest: Mapping[str, Any], *, as_user: Identity | None = None) -> bool:
        """Create `manifest` unless an object of the same kind, namespace and name exists.

        Returns False, changing nothing, when one exists (a Pod's spec cannot be replaced, and
        a command repeated after a crash must not undo a bind). Raises as `apply` does.
        """
        ...

    async def delete(self, kind: str, name: str, *, namespace: str = "", uid: str = "") -> bool:
        """Delete one object; return False when it did not exist (or, with `uid`, when the
        object of that name now is another one: it is left alone)."""
        ...

    async def list_nodes(self) -> list[NodeView]:
        """Return every node, sorted by name."""
        ...

    async def list_pods(self) -> list[PodView]:
        """Return every pod (any phase, bound or not), sorted by namespace and name."""
        ...

    async def list_workload_objects(self) -> list[dict[str, Any]]:
        """Return every object a watch of "workloads" shows that may stand for a workload:
        the Jobs that name a queue and every Kueue Workload, as stored (for the watcher, to
        find those deleted while its watch could not show it). Paged on Kubernetes."""
        ...

    def watch(
        self,
        *,
        from_revision: int = 0,
        selection: Selection = "workloads",
        on_progress: Callable[[int], None] | None = None,
        lists_again: bool = False,
        on_listed: Callable[[], None] | None = None,
    ) -> AsyncGenerator[ClusterChange, None]:
        """Yield every object as ADDED, then each change as it happens, until closed.

        With `from_revision` > 0 (the `revision` of the last change the caller handled) there
        is no initial list: the watch yields only changes after that revision, so a restarted
        consumer replays nothing it has seen. Revisions strictly increase; none repeats. When
        the deletions after that revision may be forgotten (a compacted resourceVersion, pruned
        tombstones) and the caller `lists_again`, it raises `ExpiredError`: the caller watches
        from 0 again, and drops what it holds that the list does not show. Without
        `lists_again` the backend lists again itself, and a deletion in the gap may go unseen.
        A resume with `lists_again` never lists itself: where it could only list (a Kubernetes
        resume from inside its initial list), it raises `ExpiredError` at once.

        `on_listed()` is called once, between changes, when a watch that lists (from 0) has
        yielded every object of its list: an object it has not shown by then was not there, so
        a caller holding objects from before (its own list, an earlier watch) drops those the
        watch did not show, with no gap between the two reads for a deletion to fall into.

        Level-triggered, like a Kubernetes informer: ADDED means "first time this watch shows the
        key" and MODIFIED "shown before", so treat both as "this is the object now". After a
        resume, changed objects the caller already knew come as ADDED, and intermediate states
        may be skipped (only the latest state of each key is kept). DELETED carries the last
        state. Close the iterator (`contextlib.aclosing`) or cancel its task to stop.

        `selection` says which objects at least are shown (a backend may show more; keys tell
        kinds apart). `on_progress(revision)` is called, between changes, once the watch has
        shown every change up to `revision`, including writes it does not yield, so a caller
        can tell when it has caught up with `current_revision`.
        """
        ...

    async def current_revision(self, *, selection: Selection = "workloads") -> int:
        """A revision such that a watch of `selection` that has shown (or reported progress
        to) it has shown every write made before this call that it shows: a watch that reads
        only what it selects reaches the last such write, not a later one of another kind."""
        ...

    async def start_workload(
        self,
        workload_key: str,
        *,
        pod_sets: Sequence[PodSetStart],
        admission: int = 0,
        origin: WorkloadOrigin | None = None,
        nodes: Mapping[str, str] | None = None,
        checked: bool = False,
    ) -> None:
        """Create the pods of admitted workload "<namespace>/<name>" (the binder's unsuspend).

        Per podset, `count` pods named `<name>-<podset>-<i>` in the workload's namespace,
        labelled `muster.dev/workload: <name>` (and `muster.dev/admission: <admission>`, the
        admission's stream sequence, when given), annotated `muster.dev/pod-set: <podset>`,
        with schedulerName "muster", unbound and Pending. Idempotent: pods that already exist
        are left as they are. Returns when every pod is stored.

        With `origin` the workload was submitted in another cluster (MultiKueue): a backend
        whose pods come from objects (Kubernetes) first creates a copy of them here.

        With `nodes` (pod name -> node; placed before the pods exist) only the pods it names
        are created, each already on its node (`spec.nodeName`, which the API server takes on
        create: one write, no Binding). One that exists already is this admission's (else a
        temporary ClusterError "AlreadyExists": an earlier admission's pod not deleted yet),
        and is bound to its node as `bind` would (created unbound before: a binder that did
        not place first). Pods the binder does not create (a Job's, a pod group's) cannot be
        created so: a permanent ClusterError "Invalid", nothing written.

        What the Ready admission checks of its Kueue Workload asked for in `podSetUpdates`
        (`muster.cluster.pod_set_updates`) goes onto the pods over `pod_sets`; one that gives a
        key the pods have another value raises PodSetUpdateConflictError, nothing written.
        `checked`: the admission passed admission checks (not admitted with its reservation);
        a backend that must read the Workload to find them may skip the read without it.
        """
        ...

    def creates_on_nodes(self, owner_kind: str) -> bool:
        """Whether `start_workload` creates the pods of an admitted workload that stands for
        an object of `owner_kind` ("" for none) itself, so they can be placed before they
        exist and created on their nodes (`nodes`): not where a controller makes them (a
        Job's, on Kubernetes). The binder and gang-permit ask alike."""
        ...

    async def bind(self, namespace: str, pod: str, node: str, *, uid: str = "") -> None:
        """Set the pod's spec.nodeName to `node` (the Binding API).

        Binding to the node it is already bound to does nothing; to another node raises
        BindConflictError; a missing pod raises NotFoundError; with `uid`, a pod of that name
        that is another one than permitted (deleted and made again) is a permanent
        ClusterError "Conflict", as the Binding API's uid precondition. Whether the node exists
        is the kubelet's concern.
        """
        ...

    async def stop_workload(
        self, workload_key: str, *, before: int = 0, pod_sets: Mapping[str, int] | None = None
    ) -> None:
        """Delete the pods of workload "<namespace>/<name>"; return when they are gone.

        With `before`, only pods of admissions stored before that stream sequence (by their
        `muster.dev/admission` label; a pod without one counts as older): a later admission's
        pods stay. With `pod_sets` (podset name -> most pods it may have), pods are found by
        their names (`<name>-<podset>-<i>`), not by listing. Idempotent: a workload without
        pods is already stopped. A copy made
        for `origin` (of an admission before `before`) is deleted with its pods.
        """
        ...

    async def probe(self) -> ClusterError | None:
        """Why the cluster cannot be reached now (None when it can): one request, no
        retries, so a heartbeat can tell the truth at once."""
        ...

    async def close(self) -> None:
        """Release what the backend holds (its connection, when it opened it)."""
        ...


def pod_name(workload: str, pod_set: str, index: int) -> str:
    """The name of pod `index` of podset `pod_set` of a workload the binder starts."""
    return f"{workload}-{pod_set}-{index}"


def refuse_leftover(found: Mapping[str, Any], wanted: Mapping[str, Any]) -> None:
    """Raise when pod `found`, in the way of `wanted` (created on its node for an admission),
    is another admission's: a pod of an earlier one not deleted yet, or not seen deleted (a
    temporary ClusterError: tried again once it is gone, never taken for the pod wanted)."""
    if admission_of(found) != admission_of(wanted):
        meta = wanted.get("metadata") or {}
        who = f"Pod/{meta.get('namespace')}/{meta.get('name')}"
        problem = f"a pod of admission {admission_of(found)} has its name still"
        raise ClusterError(who, "AlreadyExists", problem, temporary=True)


def split_workload_key(workload_key: str) -> tuple[str, str]:
    """Return the namespace and name of "<namespace>/<name>"; ClusterError when it is not that."""
    namespace, _, name = workload_key.partition("/")
    if not namespace or not name:
        raise ClusterError(
            f"Workload/{workload_key}", "Invalid", 'workload key must be "<namespace>/<name>"'
        )
    return namespace, name
