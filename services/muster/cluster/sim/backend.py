"""SimBackend: the ClusterBackend of a simulated cluster, over the objects in `SimStore`.

What the Kubernetes API server and its controllers would do on write is done here: defaults
(pod phase, node Ready condition and allocatable), server-set fields (uid, creationTimestamp),
and the Job controller's part of "unsuspend" (creating an admitted workload's pods). Pods then
run under the sim kubelet (`muster.cluster.sim.kubelet`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import random
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, TypeVar

import msgspec

from muster.api.convert import KUEUE_V1BETA1, stable_uid
from muster.api.decode import decode_documents
from muster.api.encode import quantities_to_strings
from muster.api.errors import ObjectErrors
from muster.api.job import workload_name_for_job
from muster.api.jobset import JOBSET_KIND, workload_name_for_jobset
from muster.api.model import ContainerResources, LimitRange, RuntimeClass, Toleration
from muster.api.podspec import pod_resources, tolerations
from muster.api.quantity import format_quantity
from muster.api.raw import RawPodSpec
from muster.api.wellknown import POD_SCRIPT_ANNOTATIONS
from muster.bus.client import connect
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES
from muster.bus.errors import wrapped
from muster.bus.kv import OpenBucket, open_bucket
from muster.bus.publisher import Publisher
from muster.cluster.backend import (
    ADMISSION_LABEL,
    ClusterBackend,
    ClusterChange,
    Identity,
    PodSetStart,
    Selection,
    WorkloadOrigin,
    admission_of,
    pod_name,
    refuse_leftover,
    split_workload_key,
)
from muster.cluster.batches import BATCH_SIZE, run_in_batches
from muster.cluster.errors import (
    BindConflictError,
    ClusterError,
    ConflictError,
    InvalidObjectError,
    NotFoundError,
)
from muster.cluster.keys import (
    NODE_PREFIX,
    OBJECT_PREFIX,
    PLACEMENT_PREFIXES,
    POD_PREFIX,
    bucket_name,
    describe,
    escape,
    identity,
    kind_of,
    namespace_prefix,
    object_key,
    pod_key,
)
from muster.cluster.objects import (
    DEFAULT_MAX_PODS,
    DEFAULT_SCHEDULER,
    POD_SET_ANNOTATION,
    RUN_SECONDS_ANNOTATION,
    SCHEDULER_NAME,
    WORKLOAD_LABEL,
    NodeView,
    PodView,
    check_node,
    check_pod,
    format_time,
    node_view,
    pod_view,
)
from muster.cluster.pod_set_updates import with_check_updates
from muster.cluster.sim.clock import Clock, WallClock
from muster.cluster.sim.store import SimStore, StoredObject, bus_errors
from muster.core.limit_ranges import summarize
from muster.core.pod_limits import defaulted_pod, pod_problems, refusal
from muster.core.pod_overhead import admitted_pod
from muster.core.runtime_class_scheduling import Scheduling, merged_scheduling

log = logging.getLogger(__name__)
V = TypeVar("V")

_MAX_ATTEMPTS = 20  # optimistic writes retried this often before the conflict is raised
# Pods this backend created and has not bound yet, kept so that a bind needs no read: at most
# this many (the oldest go first; a bind of one that went reads it).
_CREATED_KEPT = 10_000
_WRITE_TIMEOUT_S = 5.0  # a write's PubAck, on a connection `connect` opened
_BINARY_RESOURCES = ("memory", "ephemeral-storage", "hugepages-")  # printed as 1Gi, not 1073741824


# Pod uids: random version-4 UUIDs, as `uuid.uuid4` writes them, from a generator seeded once
# from the OS (and again in a forked child, which would otherwise repeat its parent's):
# `uuid4` reads os.urandom for each, a system call per pod (5.8 µs a uid against 0.7).
# Unpredictability is not needed: a uid is an identity, not a secret.
_UIDS = random.Random()  # seeded from os.urandom
os.register_at_fork(after_in_child=_UIDS.seed)
_V4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))  # the version and variant bits
_V4_SET = (0x4000 << 64) | (0x8000 << 48)  # version 4, variant RFC 4122


def _new_uid() -> str:
    digits = f"{_UIDS.getrandbits(128) & _V4_CLEAR | _V4_SET:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


class SimBackend:
    """The simulated cluster behind the ClusterBackend protocol."""

    def __init__(
        self,
        store: SimStore,
        *,
        clock: Clock | None = None,
        new_uid: Callable[[], str] = _new_uid,
        on_close: Callable[[], Awaitable[None]] | None = None,
        placed_first: bool = True,
    ) -> None:
        self.store = store
        self._placed_first = placed_first  # False: created unbound, then bound (tests)
        self._clock = clock or WallClock()
        self._new_uid = new_uid  # pod uids: a recreated pod must get a new one
        self._on_close = on_close
        # Pod key -> the pod as created here, with its revision (see `bind`).
        self._created: dict[str, StoredObject] = {}

    @classmethod
    async def connect(cls, url: str, *, cluster: str, clock: Clock | None = None) -> SimBackend:
        """Connect to NATS at `url` and open `cluster`'s store; `close` drains the connection."""
        with bus_errors(), wrapped(f"connecting to NATS at {url}"):
            nc = await connect(url, name=f"muster-sim-{cluster}")
        try:
            js = nc.jetstream()
            writes = Publisher(
                nc, js, max_event_bytes=DEFAULT_MAX_EVENT_BYTES, timeout_s=_WRITE_TIMEOUT_S
            )
            with bus_errors():
                bucket = await open_bucket(js, bucket_name(cluster), writer=writes)
        except BaseException:
            await nc.close()
            raise
        return cls(SimStore(bucket), clock=clock, on_close=nc.drain)

    @classmethod
    async def open(
        cls, open_bucket: OpenBucket, *, cluster: str, clock: Clock | None = None
    ) -> SimBackend:
        """Open `cluster`'s store in the buckets `open_bucket` opens over a connection the
        caller owns (`Bus.kv`)."""
        return cls(await SimStore.open(open_bucket, cluster=cluster), clock=clock)

    async def close(self) -> None:
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            with bus_errors(), wrapped("draining the NATS connection"):
                await on_close()

    # --- objects ------------------------------------------------------------------------------

    # `as_user`: the simulated cluster has no access control to judge the user by.
    async def apply(self, manifest: Mapping[str, Any], *, as_user: Identity | None = None) -> None:
        kind, key, obj = _checked(manifest)
        for _ in range(_MAX_ATTEMPTS):
            current = await self.store.get(key)
            if kind == "Pod" and current is None:
                obj = await self._limited(key, obj)
            prepared = self._prepared(obj, kind=kind, current=current)
            try:
                if current is None:
                    await self.store.create(key, prepared)
                else:
                    await self.store.update(key, prepared, revision=current.revision)
            except ConflictError:
                continue
            return
        raise ConflictError(describe(key), f"still changing after {_MAX_ATTEMPTS} attempts")

    async def create(self, manifest: Mapping[str, Any], *, as_user: Identity | None = None) -> bool:
        kind, key, obj = _checked(manifest)
        if kind == "Pod":
            obj = await self._limited(key, obj)
        prepared = self._prepared(obj, kind=kind, current=None)
        try:
            revision = await self.store.create(key, prepared)
        except ConflictError:
            return False
        if kind == "Pod":
            self._keep_created(StoredObject(key=key, obj=prepared, revision=revision))
        return True

    async def _limited(self, key: str, pod: dict[str, Any]) -> dict[str, Any]:
        """`pod` (a new one, checked by `_checked`) as the API server's LimitRanger admits it
        in its namespace (`muster.core.pod_limits`): the LimitRanges' defaults filled in, or
        ClusterError Forbidden, in Kubernetes' words, when it is outside their bounds.

        The pods `start_workload` makes are not passed here: they request what admission
        charged, already adjusted to the LimitRanges by the engine (`core.limit_ranges`)."""
        spec = pod.setdefault("spec", {})
        if spec.get("runtimeClassName") or spec.get("overhead"):
            await self._runtime_class_admitted(key, pod)
        namespace = pod["metadata"].get("namespace", "")
        stored = await self.store.list(
            f"{OBJECT_PREFIX}{escape('LimitRange')}.{escape(namespace)}."
        )
        if not stored:
            return pod  # the common case: one list of no key
        # One the API server would refuse is never stored (api.limit_range checks it on Submit).
        objects, _ = decode_documents([s.obj for s in stored], names_checked=True)
        summary = summarize(o for o in objects if isinstance(o, LimitRange))
        written = pod_resources(msgspec.convert(spec, RawPodSpec), ObjectErrors(""), path="spec")
        limited = defaulted_pod(written, summary)
        problems = pod_problems(limited, summary)
        if problems:
            raise ClusterError(describe(key), "Forbidden", refusal(_meta(pod)["name"], problems))
        for field, containers in (
            ("containers", limited.containers),
            ("initContainers", limited.init_containers),
        ):
            for container, resources in zip(spec.get(field) or [], containers, strict=True):
                _fill(container.setdefault("resources", {}), resources)
        return pod

    async def _runtime_class_admitted(self, key: str, pod: dict[str, Any]) -> None:
        """The API server's RuntimeClass admission on new pod `pod`: its RuntimeClass's
        overhead written into `spec.overhead` (`core.pod_overhead`), so the pod asks it on its
        node, and its scheduling merged into the pod's nodeSelector and tolerations
        (`core.runtime_class_scheduling`), so it is placed where that runtime is; ClusterError
        Forbidden, in Kubernetes' words, when it would refuse the pod."""
        spec = pod["spec"]
        name = spec.get("runtimeClassName") or ""
        stored = await self.store.get(object_key("RuntimeClass", "", name)) if name else None
        found = None
        if stored is not None:
            objects, _ = decode_documents([stored.obj], names_checked=True)
            found = next((o for o in objects if isinstance(o, RuntimeClass)), None)
        raw = msgspec.convert(spec, RawPodSpec)
        admitted = admitted_pod(pod_resources(raw, ObjectErrors(""), path="spec"), found)
        scheduling = (
            merged_scheduling(raw.node_selector, tolerations(raw.tolerations), found)
            if found is not None
            else None
        )
        for refused in (admitted, scheduling):
            if isinstance(refused, str):
                problem = refusal(_meta(pod)["name"], [refused])
                raise ClusterError(describe(key), "Forbidden", problem)
        if not isinstance(admitted, str) and admitted.overhead:
            spec["overhead"] = quantities_to_strings(admitted.overhead)
        if isinstance(scheduling, Scheduling):
            _schedule(spec, scheduling)

    def kept_for_binds(self) -> int:
        """How many pods this backend holds to bind without a read: those it created unbound
        and has not bound yet, at most `_CREATED_KEPT` (none of those made on their nodes)."""
        return len(self._created)

    def _keep_created(self, pod: StoredObject) -> None:
        self._created[pod.key] = pod
        if len(self._created) > _CREATED_KEPT:
            del self._created[next(iter(self._created))]

    def _prepared(
        self, manifest: dict[str, Any], *, kind: str, current: StoredObject | None
    ) -> dict[str, Any]:
        """Return `manifest` with what the API server sets or keeps on create and replace."""
        obj = copy.deepcopy(manifest)
        meta = obj["metadata"]
        old_meta = current.obj.get("metadata", {}) if current else {}
        if not meta.get("uid"):
            meta["uid"] = old_meta.get("uid") or (
                self._new_uid()
                if kind == "Pod"
                else stable_uid(kind, meta.get("namespace", ""), meta["name"])
            )
        meta.setdefault(
            "creationTimestamp",
            old_meta.get("creationTimestamp") or format_time(self._clock.now_s()),
        )
        if "status" not in obj and current is not None and "status" in current.obj:
            obj["status"] = current.obj["status"]
        if kind == "Node":
            _default_node(obj)
        elif kind == "Pod":
            obj.setdefault("spec", {}).setdefault("schedulerName", DEFAULT_SCHEDULER)
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        return obj

    async def delete(self, kind: str, name: str, *, namespace: str = "", uid: str = "") -> bool:
        manifest = {"kind": kind, "metadata": {"name": name, "namespace": namespace}}
        keep = None if not uid else (lambda obj: _meta(obj).get("uid") != uid)
        return await self._delete(object_key(*identity(manifest)), keep=keep)

    async def _delete(
        self, key: str, *, keep: Callable[[dict[str, Any]], bool] | None = None
    ) -> bool:
        """Delete `key` unless `keep(object)` says to leave it; whether it deleted it."""
        for _ in range(_MAX_ATTEMPTS):
            current = await self.store.get(key)
            if current is None or (keep is not None and keep(current.obj)):
                return False
            self._created.pop(key, None)
            try:
                await self.store.delete(current)
            except ConflictError:
                continue
            return True
        raise ConflictError(describe(key), f"still changing after {_MAX_ATTEMPTS} attempts")

    async def list_nodes(self) -> list[NodeView]:
        views = [_view(node_view, s) for s in await self.store.list(NODE_PREFIX)]
        return sorted((v for v in views if v is not None), key=lambda v: v.name)

    async def list_pods(self) -> list[PodView]:
        views = [_view(pod_view, s) for s in await self.store.list(POD_PREFIX)]
        return sorted((v for v in views if v is not None), key=lambda v: (v.namespace, v.name))

    async def list_workload_objects(self) -> list[dict[str, Any]]:
        found = []
        for kind in ("Job", JOBSET_KIND, "Workload"):  # Kueue's (the Workload API's is apart)
            found += await self.store.list(f"{OBJECT_PREFIX}{escape(kind)}.")
        return [stored.obj for stored in found]

    async def watch(
        self,
        *,
        from_revision: int = 0,
        selection: Selection = "workloads",
        on_progress: Callable[[int], None] | None = None,
        lists_again: bool = False,
        on_listed: Callable[[], None] | None = None,
    ) -> AsyncGenerator[ClusterChange, None]:
        """As the protocol says. "workloads" shows every object (the watcher reads most kinds);
        "placement" reads only the keys placement reads (`PLACEMENT_PREFIXES`), so the writes
        of other kinds are never delivered to it, nor counted in its progress: its
        `current_revision` is the last write of those keys."""
        changes = self.store.watch(
            *_prefixes(selection),
            from_revision=from_revision,
            on_skipped=on_progress,
            expires=lists_again,
            on_listed=on_listed,
        )
        async with contextlib.aclosing(changes):
            async for change in changes:
                yield ClusterChange(
                    kind=kind_of(change.key),
                    type=change.type,
                    key=change.key,
                    obj=change.obj,
                    revision=change.revision,
                )

    async def current_revision(self, *, selection: Selection = "workloads") -> int:
        return await self.store.last_revision(*_prefixes(selection))

    # --- workloads ----------------------------------------------------------------------------

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
        """As the protocol says; a workload from another cluster (`origin`) needs no copy
        here: the simulated cluster's pods stand on their own. The Kueue Workload stored here
        (if any) is read only when `checked` or when the pods lack `muster.dev/run-seconds`:
        a workload admitted with its reservation, the common case, costs no read."""
        namespace, name = split_workload_key(workload_key)
        needs_script = not all(RUN_SECONDS_ANNOTATION in ps.annotations for ps in pod_sets)
        stored = None
        if checked or needs_script:
            stored = await self.store.get(object_key("Workload", namespace, name))
        if checked and stored is not None:
            pod_sets = with_check_updates(
                pod_sets, stored.obj, what=workload_key
            )  # as on Kubernetes
        annotations: dict[str, str] = {}
        if needs_script:
            annotations = await self._workload_annotations(namespace, name, stored)
        labels = {WORKLOAD_LABEL: name, **({ADMISSION_LABEL: str(admission)} if admission else {})}
        created_at = format_time(self._clock.now_s())
        makers = [
            _PodMaker(namespace, ps, labels=labels, annotations=annotations, created_at=created_at)
            for ps in pod_sets
        ]
        count = len(nodes) if nodes is not None else sum(ps.count for ps in pod_sets)
        if count <= BATCH_SIZE:  # one batch (most workloads): made at once, as a list
            pods: Iterable[dict[str, Any]] = [pod for maker in makers for pod in maker.pods(nodes)]
        else:  # made as their batch starts (cluster/batches.py): never all held
            pods = (pod for maker in makers for pod in maker.pods(nodes))
        await run_in_batches(pods, self._create_if_absent)

    async def _create_if_absent(self, pod: dict[str, Any]) -> None:
        # Pods get their uid here, not in apply: apply replaces, start_workload never does.
        pod["metadata"]["uid"] = self._new_uid()
        meta = pod["metadata"]
        key = pod_key(meta["namespace"], meta["name"])
        try:
            revision = await self.store.create(key, pod)
        except ConflictError:  # it exists: an idempotent start leaves it alone
            node = pod["spec"].get("nodeName")
            current = await self.store.get(key) if node else None
            if current is None:
                return
            refuse_leftover(current.obj, pod)
            if current.obj.get("spec", {}).get("nodeName") != node:  # not unbound, nor elsewhere
                uid = _meta(current.obj)["uid"]
                await self.bind(meta["namespace"], meta["name"], node, uid=uid)
            return
        if not pod["spec"].get("nodeName"):  # one made on its node is never bound here
            self._keep_created(StoredObject(key=key, obj=pod, revision=revision))

    def creates_on_nodes(self, owner_kind: str) -> bool:
        """Always (unless made not to place first): the simulated cluster has no
        controllers, its binder makes every pod."""
        return self._placed_first

    async def _workload_annotations(
        self, namespace: str, name: str, stored: StoredObject | None
    ) -> dict[str, str]:
        """Return the annotations the kubelet reads (run-seconds, readiness) of the stored
        Workload (`stored`, read by the caller), or of the Job or JobSet it is for."""
        sources = [stored] if stored is not None else []
        for kind, name_of in _OWNERS.items():
            if sources:
                break
            owners = await self.store.list(f"{OBJECT_PREFIX}{escape(kind)}.{escape(namespace)}.")
            sources = [o for o in owners if _owner_workload_name(o.obj, name_of, kind) == name]
        for source in sources:
            meta = source.obj.get("metadata", {})
            annotations = meta.get("annotations", {})
            found = {
                key: value
                for key in POD_SCRIPT_ANNOTATIONS
                if isinstance(value := annotations.get(key), str)
            }
            if found:
                return found
        return {}

    async def bind(self, namespace: str, pod: str, node: str, *, uid: str = "") -> None:
        """Bind from the pod as this backend created it when it still knows it (no read: the
        update names that revision, so a pod changed since is a conflict, then read afresh)."""
        key = pod_key(namespace, pod)
        current = self._created.pop(key, None)
        for _ in range(_MAX_ATTEMPTS):
            if current is None:
                current = await self.store.get(key)
                if current is None:
                    raise NotFoundError(describe(key))
            found = _meta(current.obj).get("uid")
            if uid and found != uid:  # the Binding API's uid precondition
                problem = f"Precondition failed: UID in precondition: {uid}, UID in object: {found}"
                raise ClusterError(describe(key), "Conflict", problem)
            obj = current.obj  # ours alone (read for this bind, or popped): changed in place
            spec = obj.setdefault("spec", {})
            bound_to = spec.get("nodeName") or ""
            if bound_to == node:
                return
            if bound_to:
                raise BindConflictError(describe(key), bound_to=bound_to, wanted=node)
            spec["nodeName"] = node
            _set_condition(obj, "PodScheduled", "True", now=self._clock.now_s())
            try:
                await self.store.update(key, obj, revision=current.revision)
            except ConflictError:
                current = None
                continue
            return
        raise ConflictError(describe(key), f"still changing after {_MAX_ATTEMPTS} attempts")

    async def stop_workload(
        self, workload_key: str, *, before: int = 0, pod_sets: Mapping[str, int] | None = None
    ) -> None:
        namespace, name = split_workload_key(workload_key)
        keys: Iterable[str]
        if pod_sets is not None:
            keys = (
                pod_key(namespace, pod_name(name, pod_set, i))
                for pod_set, count in sorted(pod_sets.items())
                for i in range(count)
            )
        else:  # names unknown: every pod of the namespace, read to find the workload's
            pods = await self.store.list(namespace_prefix(namespace))
            keys = [p.key for p in pods if _labels(p.obj).get(WORKLOAD_LABEL) == name]

        def keep(obj: dict[str, Any]) -> bool:
            if _labels(obj).get(WORKLOAD_LABEL) != name:
                return True  # a pod of that name, not the workload's
            return bool(before) and admission_of(obj) >= before  # a later admission's

        async def delete(key: str) -> None:
            await self._delete(key, keep=keep)

        await run_in_batches(keys, delete)

    async def probe(self) -> ClusterError | None:
        """The simulated cluster is its NATS bucket: reachable while the bus is (a lost
        simulated cluster is one whose services stopped)."""
        return None


# --- helpers: objects the sim writes -----------------------------------------------------------


def _checked(manifest: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """Return (kind, key, a copy of `manifest` with its namespace as stored), or raise
    InvalidObjectError for a Node or Pod that would not decode."""
    kind, namespace, name = identity(manifest)
    key = object_key(kind, namespace, name)
    obj = copy.deepcopy(dict(manifest))
    meta = obj.setdefault("metadata", {})
    if namespace:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    checks = {"Node": check_node, "Pod": check_pod}.get(kind)
    problems = list(checks(obj)) if checks else []
    if problems:
        raise InvalidObjectError(describe(key), problems)
    return kind, key, obj


class _PodMaker:
    """Makes the pods of one podset of a workload started: what they share is worked out once
    (requests as quantities, the selector, tolerations, annotations), not for every pod."""

    def __init__(
        self,
        namespace: str,
        pod_set: PodSetStart,
        *,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        created_at: str,
    ) -> None:
        self._namespace = namespace
        self._pod_set = pod_set
        # An admission check's labels (podSetUpdates) first: muster's own cannot be replaced.
        self._labels = {**pod_set.labels, **labels}
        self._annotations = {**annotations, **pod_set.annotations, POD_SET_ANNOTATION: pod_set.name}
        self._created_at = created_at
        self._requests = {
            resource: format_quantity(milli, binary=resource.startswith(_BINARY_RESOURCES))
            for resource, milli in sorted(pod_set.requests.items())
        }
        self._tolerations = [_toleration_json(t) for t in pod_set.tolerations]

    def pods(self, nodes: Mapping[str, str] | None) -> Iterator[dict[str, Any]]:
        """The podset's pods in index order, each made when asked for: all of them, or
        (`nodes`) those given a node, each on it."""
        workload, names = self._labels[WORKLOAD_LABEL], range(self._pod_set.count)
        if nodes is None:
            return (self.pod(pod_name(workload, self._pod_set.name, i)) for i in names)
        return (
            self.pod(pod, node=nodes[pod])
            for i in names
            if (pod := pod_name(workload, self._pod_set.name, i)) in nodes
        )

    def pod(self, name: str, *, node: str = "") -> dict[str, Any]:
        """The manifest of pod `name` (uid filled in by the caller); with `node`, created on it
        as a bind would leave it (PodScheduled). Nothing in it is shared with another pod: a
        bind changes a kept pod in place."""
        pod_set = self._pod_set
        spec: dict[str, Any] = {
            "schedulerName": SCHEDULER_NAME,
            "containers": [{"name": "main", "resources": {"requests": dict(self._requests)}}],
        }
        if pod_set.node_selector:
            spec["nodeSelector"] = dict(pod_set.node_selector)
        if self._tolerations:
            spec["tolerations"] = [dict(t) for t in self._tolerations]
        status: dict[str, Any] = {"phase": "Pending"}
        if node:
            spec["nodeName"] = node
            status["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": self._created_at}
            ]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self._namespace,
                "labels": dict(self._labels),
                "annotations": dict(self._annotations),
                "ownerReferences": [
                    {
                        "apiVersion": KUEUE_V1BETA1,
                        "kind": "Workload",
                        "name": self._labels[WORKLOAD_LABEL],
                        "controller": True,
                    }
                ],
                "creationTimestamp": self._created_at,
            },
            "spec": spec,
            "status": status,
        }


def _schedule(spec: dict[str, Any], scheduling: Scheduling) -> None:
    """Write a RuntimeClass's merged scheduling into a new pod's `spec`."""
    if scheduling.node_selector:
        spec["nodeSelector"] = scheduling.node_selector
    added = [_toleration_json(t) for t in scheduling.added_tolerations]
    if added:
        spec["tolerations"] = [*(spec.get("tolerations") or []), *added]


def _toleration_json(toleration: Toleration) -> dict[str, str]:
    return {k: v for k, v in msgspec.to_builtins(toleration).items() if v}


def _fill(written: dict[str, Any], resources: ContainerResources) -> None:
    """Add to a container's `resources` as written the requests and limits it leaves unset."""
    for part, amounts in (("requests", resources.requests), ("limits", resources.limits)):
        have = written.get(part) or {}
        missing = {r: amount for r, amount in amounts.items() if r not in have}
        if missing:
            written[part] = {**have, **quantities_to_strings(missing)}


def _default_node(obj: dict[str, Any]) -> None:
    """Fill what the kubelet reports for a node: allocatable from capacity, max pods, Ready."""
    status = obj.setdefault("status", {})
    allocatable = status.setdefault("allocatable", dict(status.get("capacity", {})))
    allocatable.setdefault("pods", DEFAULT_MAX_PODS)
    conditions = status.setdefault("conditions", [])
    if not any(c.get("type") == "Ready" for c in conditions if isinstance(c, dict)):
        conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady"})


def _set_condition(obj: dict[str, Any], condition: str, status: str, *, now: float) -> None:
    conditions = [
        c for c in obj.setdefault("status", {}).get("conditions", []) if c.get("type") != condition
    ]
    conditions.append({"type": condition, "status": status, "lastTransitionTime": format_time(now)})
    obj["status"]["conditions"] = conditions


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata", {})
    return meta if isinstance(meta, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = _meta(obj).get("labels", {})
    return labels if isinstance(labels, Mapping) else {}


# The owners whose Workload is named after them: kind → how (`muster.api.job`, `.jobset`).
_OWNERS: dict[str, Callable[[str, str], str]] = {
    "Job": workload_name_for_job,
    JOBSET_KIND: workload_name_for_jobset,
}


def _owner_workload_name(
    owner: Mapping[str, Any], name_of: Callable[[str, str], str], kind: str
) -> str:
    meta = owner.get("metadata", {})
    name = meta.get("name", "")
    namespace = meta.get("namespace", "")
    return name_of(name, meta.get("uid") or stable_uid(kind, namespace, name))


def _view(parse: Callable[[Mapping[str, Any]], V], stored: StoredObject) -> V | None:
    """Return the view of one stored object; one that will not decode is logged and skipped."""
    try:
        return parse(stored.obj)
    except msgspec.ValidationError as exc:
        log.warning("skipping undecodable object", extra={"key": stored.key, "error": str(exc)})
        return None


def _implements_the_protocol(sim: SimBackend) -> ClusterBackend:
    return sim  # mypy checks here that SimBackend is a ClusterBackend


def _prefixes(selection: Selection) -> tuple[str, ...]:
    """The keys a watch of `selection` reads (none: every key)."""
    return PLACEMENT_PREFIXES if selection == "placement" else ()
