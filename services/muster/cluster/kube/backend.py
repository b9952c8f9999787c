"""KubeBackend: the ClusterBackend of a real cluster, over the official `kubernetes` client.

Watch side: `informer.merged_watch` over `resources.watched_sources`. Binder side: a Job a
Kueue Workload stands for is started and stopped as Kueue does (`jobs`); a bare Kueue Workload
gets its pods from its podset templates (muster is its controller); a pod group's pods exist
already. Binding uses the `pods/binding` subresource. Writes are paced by a token bucket and
retried (409 Conflict re-reads) before a ClusterError leaves; every client failure is mapped in
`transport`, so no kubernetes or aiohttp exception gets out.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from muster.api.job import QUEUE_NAME_KEY
from muster.api.resource import Resource
from muster.api.wellknown import POD_GROUP_LABEL, POD_SET_ANNOTATION, WORKLOAD_LABEL
from muster.bus.progress import advanced
from muster.cluster.backend import (
    ADMISSION_LABEL,
    ClusterBackend,
    ClusterChange,
    Identity,
    PodSetStart,
    Selection,
    WorkloadCopy,
    WorkloadOrigin,
    admission_of,
    pod_name,
    refuse_leftover,
    split_workload_key,
)
from muster.cluster.batches import run_in_batches
from muster.cluster.errors import (
    BindConflictError,
    ClusterError,
    InvalidObjectError,
    NotFoundError,
    RequestsRefusedError,
)
from muster.cluster.kube import copies, jobs, jobsets
from muster.cluster.kube.config import api_client
from muster.cluster.kube.discovery import GangApi
from muster.cluster.kube.informer import SEQ_BITS, merged_watch, resource_version_now
from muster.cluster.kube.ratelimit import TokenBucket
from muster.cluster.kube.resize import (
    NO_RUNTIME_CLASSES,
    ResizeError,
    RuntimeOverheads,
    resized,
    runtime_class_names,
)
from muster.cluster.kube.resources import (
    JOBS,
    JOBSETS,
    NAMESPACES,
    NODES,
    PODS,
    RUNTIME_CLASSES,
    kueue_resources,
    resource_for,
    resource_for_kind,
    watched_sources,
)
from muster.cluster.kube.retry import cancelling_check, retrying
from muster.cluster.kube.settings import KubeConfig
from muster.cluster.kube.transport import MERGE_PATCH, Response, Transport
from muster.cluster.objects import NodeView, PodView, check_node, check_pod, node_view, pod_view
from muster.cluster.pod_set_updates import with_check_updates

log = logging.getLogger(__name__)
V = TypeVar("V")

_NAMESPACED_DEFAULT = "default"
# What muster writes is checked as kubectl's writes are: an unknown field is an error, not a
# warning, so a field muster got wrong never silently disappears. (Status writes are not:
# `status`.)
STRICT = "Strict"
_STRICT = (("fieldValidation", STRICT),)


class KubeBackend:
    """A Kubernetes cluster behind the ClusterBackend protocol."""

    def __init__(self, transport: Transport, *, config: KubeConfig) -> None:
        problems = config.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.transport = transport
        self.config = config
        self._kueue = kueue_resources(config.kueue_version)
        self.gang_api = GangApi(transport)

    @classmethod
    async def connect(cls, config: KubeConfig) -> KubeBackend:
        """A backend over a client it owns (`close` closes it)."""
        api = await api_client(config)
        writes = TokenBucket(config.write_qps, config.write_burst)
        transport = Transport(api, writes=writes, request_timeout_s=config.request_timeout_s)
        return cls(transport, config=config)

    @classmethod
    def unconnected(cls, config: KubeConfig) -> KubeBackend:
        """A backend whose client comes later (`Transport.use`): a worker's (`worker`)."""
        writes = TokenBucket(config.write_qps, config.write_burst)
        transport = Transport(None, writes=writes, request_timeout_s=config.request_timeout_s)
        return cls(transport, config=config)

    async def close(self) -> None:
        await self.transport.close()

    async def _retrying(self, op: Callable[[], Awaitable[V]]) -> V:
        return await retrying(op, backoff=self.config.retry)

    # --- objects ------------------------------------------------------------------------------

    def _prepared(self, manifest: Mapping[str, Any]) -> tuple[Resource, str, str, dict[str, Any]]:
        """(resource, namespace, name, a copy of `manifest` as stored); raises for a Node or
        Pod that would not decode, or a kind muster does not write."""
        resource = resource_for(manifest, kueue_version=self.config.kueue_version)
        obj = copy.deepcopy(dict(manifest))
        obj.setdefault("apiVersion", resource.api_version)
        meta = obj.setdefault("metadata", {})
        name = str(meta.get("name") or "")
        if not name:
            raise InvalidObjectError(f"{resource.kind}/", ["metadata.name: is required"])
        namespace = ""
        if resource.namespaced:
            namespace = meta.get("namespace") or _NAMESPACED_DEFAULT
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        checks = {"Node": check_node, "Pod": check_pod}.get(resource.kind)
        problems = list(checks(obj)) if checks is not None and resource.group == "" else []
        if problems:
            raise InvalidObjectError(resource.describe(name, namespace), problems)
        return resource, namespace, name, obj

    async def apply(
        self,
        manifest: Mapping[str, Any],
        *,
        as_user: Identity | None = None,
        field_validation: str = STRICT,
    ) -> None:
        """As the protocol says; the API server validates the fields as `field_validation`
        asks (Strict: an unknown field is refused, in its words)."""
        resource, namespace, name, obj = self._prepared(manifest)
        who = resource.describe(name, namespace)
        query = [("fieldValidation", field_validation)]

        async def create_or_replace() -> None:
            created = await self.transport.request(
                "POST",
                resource.collection_path(namespace),
                obj=who,
                query=query,
                body=obj,
                as_user=as_user,
            )
            if created.ok:
                return
            if not _already_exists(created):
                raise created.error(who)
            current = await self._get(resource, name, namespace, as_user=as_user)
            replacement = copy.deepcopy(obj)
            meta, old_meta = replacement["metadata"], current.get("metadata") or {}
            meta["resourceVersion"] = old_meta.get("resourceVersion", "")
            meta.setdefault("uid", old_meta.get("uid"))
            if "status" not in replacement and "status" in current:
                replacement["status"] = current["status"]
            await self.transport.checked(
                "PUT",
                resource.object_path(name, namespace),
                obj=who,
                query=query,
                body=replacement,
                as_user=as_user,
            )

        await self._retrying(create_or_replace)

    async def create(
        self,
        manifest: Mapping[str, Any],
        *,
        as_user: Identity | None = None,
        field_validation: str = STRICT,
    ) -> bool:
        resource, namespace, name, obj = self._prepared(manifest)
        who = resource.describe(name, namespace)

        async def create() -> bool:
            response = await self.transport.request(
                "POST",
                resource.collection_path(namespace),
                obj=who,
                query=[("fieldValidation", field_validation)],
                body=obj,
                as_user=as_user,
            )
            if response.ok:
                return True
            if _already_exists(response):
                return False
            raise response.error(who)

        return await self._retrying(create)

    async def delete(
        self,
        kind: str,
        name: str,
        *,
        namespace: str = "",
        uid: str = "",
        as_user: Identity | None = None,
    ) -> bool:
        resource = resource_for_kind(kind, kueue_version=self.config.kueue_version)
        namespace = (namespace or _NAMESPACED_DEFAULT) if resource.namespaced else ""
        return await self._delete(resource, name, namespace, uid=uid, as_user=as_user)

    async def merge_patch(
        self,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str = "",
        as_user: Identity | None = None,
    ) -> None:
        """Merge `patch` into object `kind` `name` (NotFoundError when there is none)."""
        resource = resource_for_kind(kind, kueue_version=self.config.kueue_version)
        namespace = (namespace or _NAMESPACED_DEFAULT) if resource.namespaced else ""
        path, who = resource.object_path(name, namespace), resource.describe(name, namespace)
        await self._retrying(
            lambda: self.transport.checked(
                "PATCH",
                path,
                obj=who,
                query=_STRICT,
                body=dict(patch),
                content_type=MERGE_PATCH,
                as_user=as_user,
            )
        )

    async def _delete(
        self,
        resource: Resource,
        name: str,
        namespace: str,
        *,
        uid: str = "",
        as_user: Identity | None = None,
    ) -> bool:
        who = resource.describe(name, namespace)
        options: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:  # another object of that name is left alone (409: the precondition failed)
            options["preconditions"] = {"uid": uid}

        async def delete() -> bool:
            response = await self.transport.request(
                "DELETE",
                resource.object_path(name, namespace),
                obj=who,
                body=options,
                as_user=as_user,
            )
            if response.status == 404 or (uid and response.status == 409):
                return False
            if not response.ok:
                raise response.error(who)
            return True

        return await self._retrying(delete)

    async def _get(
        self, resource: Resource, name: str, namespace: str = "", *, as_user: Identity | None = None
    ) -> dict[str, Any]:
        who = resource.describe(name, namespace)
        path = resource.object_path(name, namespace)
        obj: dict[str, Any] = await self._retrying(
            lambda: self.transport.checked("GET", path, obj=who, as_user=as_user)
        )
        return obj

    async def _get_or_none(
        self, resource: Resource, name: str, namespace: str = ""
    ) -> dict[str, Any] | None:
        try:
            return await self._get(resource, name, namespace)
        except NotFoundError:
            return None

    async def _runtime_classes(
        self, obj: Mapping[str, Any], pod_sets: Sequence[PodSetStart]
    ) -> RuntimeOverheads:
        """The `overhead.podFixed` of each RuntimeClass the pod templates of `obj` (a Job,
        JobSet or Kueue Workload) name, when a podset was routed (`resize` counts it in the
        requests its pods get); one a cluster does not have is left out (`resize` says so).
        RequestsRefusedError when the API server refuses the read."""
        if not any(ps.routed for ps in pod_sets):
            return NO_RUNTIME_CLASSES
        found: dict[str, Mapping[str, Any]] = {}
        for name in sorted(runtime_class_names(obj)):
            try:
                rc = await self._get_or_none(RUNTIME_CLASSES, name)
            except ClusterError as err:
                if err.temporary:
                    raise
                # Refused (a ClusterRole without the rule): the route is not taken, and the
                # workload runs as written on its declared queue, rather than dead-lettered.
                message = f"its overhead, for the routed requests, cannot be read: {err.message}"
                raise RequestsRefusedError(err.obj, message) from err
            if rc is not None:
                fixed = (rc.get("overhead") or {}).get("podFixed")
                found[name] = fixed if isinstance(fixed, dict) else {}
        return found

    async def _list(
        self, resource: Resource, *, namespace: str = "", **selectors: str
    ) -> list[dict[str, Any]]:
        query = [(k, v) for k, v in selectors.items() if v]
        items, _ = await self._retrying(
            lambda: self.transport.list_all(
                resource.collection_path(namespace),
                obj=f"{resource.kind}List",
                query=query,
                page_size=self.config.watch.page_size,
            )
        )
        return items

    async def list_nodes(self) -> list[NodeView]:
        views = [_view(node_view, obj) for obj in await self._list(NODES)]
        return sorted((v for v in views if v is not None), key=lambda v: v.name)

    async def list_pods(self) -> list[PodView]:
        views = [_view(pod_view, obj) for obj in await self._list(PODS)]
        return sorted((v for v in views if v is not None), key=lambda v: (v.namespace, v.name))

    async def list_workload_objects(self) -> list[dict[str, Any]]:
        """As the protocol says: what `watched_sources` follows of them (Jobs by the queue
        label), and no Kueue Workloads where Kueue's CRDs are not installed."""
        objects = await self._list(JOBS, labelSelector=QUEUE_NAME_KEY)
        with contextlib.suppress(NotFoundError):  # no CRD: no JobSet to run
            objects += await self._list(JOBSETS, labelSelector=QUEUE_NAME_KEY)
        workloads = kueue_resources(self.config.kueue_version)["Workload"]
        with contextlib.suppress(NotFoundError):  # no CRD: no Kueue Workload stands for one
            objects += await self._list(workloads)
        return objects

    async def watch(
        self,
        *,
        from_revision: int = 0,
        selection: Selection = "workloads",
        on_progress: Callable[[int], None] | None = None,
        lists_again: bool = False,
        on_listed: Callable[[], None] | None = None,
    ) -> AsyncGenerator[ClusterChange, None]:
        """As the protocol says; the gang API's resources are those the server serves now
        (`discovery`), looked up again at each watch, as long as the server takes to answer
        (a worker's may be away: the watch starts when it is back)."""
        self.gang_api.forget()
        gang_api = await self._discovered()
        sources = watched_sources(
            scheduler_name=self.config.scheduler_name,
            kueue_version=self.config.kueue_version,
            selection=selection,
            gang_api=gang_api,
        )
        changes = merged_watch(
            self.transport,
            sources,
            settings=self.config.watch,
            from_revision=from_revision,
            on_progress=on_progress,
            lists_again=lists_again,
            on_listed=on_listed,
        )
        async with contextlib.aclosing(changes):
            async for change in changes:
                yield change

    async def _discovered(self) -> dict[str, Resource]:
        """The gang API's resources, asked again with back-off while the server does not
        answer (logged when the failure changes)."""
        delays = self.config.watch.backoff.delays()
        told = ""
        while True:
            try:
                return await self._retrying(self.gang_api.resources)
            except ClusterError as err:
                if not err.temporary:
                    raise
                cancelling_check()
                advanced()  # an answer: slow, not stalled (bus/progress.py)
                delay_s = self.config.watch.backoff.wait_s(next(delays), err)
                if str(err) != told:
                    log.warning("discovery: %s; asking again", err)
                    told = str(err)
                await asyncio.sleep(delay_s)

    async def current_revision(self, *, selection: Selection = "workloads") -> int:
        """The API server's resourceVersion now, as a watch revision (`informer`), whatever
        the selection (a watch's bookmarks report progress past what it does not select).

        A watch reaches it once every source has delivered that far: at once after its
        initial lists, otherwise with each source's next event or bookmark (about a minute
        for a quiet resource on a real API server).
        """
        rv = await self._retrying(lambda: resource_version_now(self.transport))
        return rv << SEQ_BITS

    # --- workloads ----------------------------------------------------------------------------

    async def start_workload(
        self,
        workload_key: str,
        *,
        pod_sets: Sequence[PodSetStart],
        admission: int = 0,
        origin: WorkloadOrigin | None = None,
        nodes: Mapping[str, str] | None = None,
        checked: bool = False,  # the Workload is read in any case
    ) -> None:
        """As the protocol says. With `origin` (MultiKueue dispatched it here from the manager
        it names), what it stands for is created here first when absent (`copies`): its Job,
        started in the same write, or its Kueue Workload, whose pods are then created."""
        namespace, name = split_workload_key(workload_key)
        jobset = await self._jobset_of(namespace, name)
        if jobset is not None:
            workload = await self._get_or_none(self._kueue["Workload"], name, namespace)
            await self._start_jobset(
                jobset,
                with_check_updates(pod_sets, workload, what=workload_key),
                workload=name,
                admission=admission,
            )
            return
        job, workload = await self._job_of(namespace, name)
        if job is not None and workload is None:
            workload = await self._get_or_none(self._kueue["Workload"], name, namespace)
        pod_sets = with_check_updates(pod_sets, workload, what=workload_key)  # its checks' asks
        if nodes is not None:
            self._refuse_placed(name, namespace, job=job, workload=workload, origin=origin)
        if job is None and workload is None and origin is not None:
            job, workload = await self._copy(namespace, name, origin, pod_sets, admission)
            if job is not None:
                return  # created started
        if job is not None:
            await self._start_job(job, pod_sets, workload=name, admission=admission)
        elif workload is not None:
            await self._create_pods(workload, pod_sets, admission=admission, nodes=nodes)
        # Otherwise a pod group: its pods exist already.

    def creates_on_nodes(self, owner_kind: str) -> bool:
        """A bare Kueue Workload's (no owner): `start_workload` makes its pods from its
        templates. A Job's are the Job controller's; a Workload owned by something else is
        left to the unbound create and bind, as before.

        On Kubernetes every `submitted` is the watcher's, of an object stored here (the gateway
        writes Submits into the API server), so an owner-less workload is a Kueue Workload
        stored here. The exception, a gateway left on `--cluster-backend sim` beside this
        cluster, publishes workloads nothing makes pods for here: their permit is refused by
        `_refuse_placed`, by name (docs/kubernetes.md)."""
        return not owner_kind

    def _refuse_placed(
        self,
        name: str,
        namespace: str,
        *,
        job: Mapping[str, Any] | None,
        workload: Mapping[str, Any] | None,
        origin: WorkloadOrigin | None,
    ) -> None:
        """Raise unless the pods of workload `name` are the binder's to create (placed, on
        their nodes): a Job's (JobSet's) are its controller's, a pod group's whoever applied
        them."""
        owner = origin.owner() if origin is not None and workload is None else None
        kind = "Job" if job is not None else str((owner or {}).get("kind") or "")
        if kind in _COPIED_OWNERS:
            why = f"its pods are its {kind}'s, created by the {kind} controller"
        elif workload is None and origin is None:
            why = (
                "no Kueue Workload or Job of that name here: its pods are a pod group's, made by "
                "whoever applied them"
            )
        else:
            return
        who = self._kueue["Workload"].describe(name, namespace)
        raise ClusterError(who, "Invalid", f"cannot create its pods on their nodes: {why}")

    async def stop_workload(
        self, workload_key: str, *, before: int = 0, pod_sets: Mapping[str, int] | None = None
    ) -> None:
        """A Job is suspended (unless a later admission started it); other pods are found by
        label (the API server's index), so `pod_sets` is not needed here. A copy from another
        cluster (MultiKueue) is deleted, as Kueue deletes remote objects, so nothing of it can
        run here again."""
        namespace, name = split_workload_key(workload_key)
        jobset = await self._jobset_of(namespace, name)
        if jobset is not None:  # suspended, or a copy deleted: its Jobs go with their pods
            if before and jobsets.admission_of_jobset(jobset) >= before:
                return  # started by a later admission than the eviction's
            if copies.origin_of(jobset):
                meta = jobset["metadata"]
                uid = str(meta.get("uid", ""))
                await self._delete(JOBSETS, str(meta["name"]), namespace, uid=uid)
            else:
                await self._stop_jobset(jobset)
            return
        job, workload = await self._job_of(namespace, name)
        if job is not None:
            if before and jobs.admission_of_job(job) >= before:
                return  # started by a later admission than the eviction's
            if not copies.origin_of(job):
                await self._stop_job(job)
                return
            meta = job["metadata"]
            await self._delete(JOBS, str(meta["name"]), namespace, uid=str(meta.get("uid", "")))
        found = await self._pods_of(namespace, name)
        pods = [p for p in found if not before or admission_of(p) < before]

        async def delete(pod: dict[str, Any]) -> None:
            meta = pod["metadata"]
            await self._delete(PODS, meta["name"], namespace, uid=meta.get("uid", ""))

        await run_in_batches(pods, delete)
        if workload is not None and copies.origin_of(workload) and len(pods) == len(found):
            await self._delete(self._kueue["Workload"], name, namespace)  # no later admission's

    async def _copy(
        self,
        namespace: str,
        name: str,
        origin: WorkloadOrigin,
        pod_sets: Sequence[PodSetStart],
        admission: int,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Create the copy of workload `name` from cluster `origin.cluster`: (its Job or JobSet,
        created started) or (None, its Kueue Workload, created); ClusterError when the cluster
        refuses, naming the namespace when that is what is missing here."""
        owner = origin.owner()
        kind = str(owner.get("kind") or "") if owner is not None else ""
        if owner is not None and kind in _COPIED_OWNERS:
            resource, start = _COPIED_OWNERS[kind]
            made = copies.owner_copy(owner, origin=origin.cluster, workload=name)
            classes = await self._runtime_classes(made, pod_sets)
            try:
                started = (
                    start(
                        made,
                        pod_sets,
                        workload=name,
                        admission=admission,
                        runtime_classes=classes,
                    )
                    or made
                )
            except ResizeError as err:
                who = resource.describe(str(made["metadata"].get("name")), namespace)
                raise RequestsRefusedError(who, f"its pod template cannot ask for {err}") from None
            return await self._create_copy(resource, started), None
        made = copies.workload_copy(origin.workload(), origin=origin.cluster)
        return None, await self._create_copy(self._kueue["Workload"], made)

    async def _create_copy(self, resource: Resource, manifest: dict[str, Any]) -> dict[str, Any]:
        meta = manifest["metadata"]
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
        who = resource.describe(name, namespace)

        async def create() -> dict[str, Any]:
            response = await self.transport.request(
                "POST",
                resource.collection_path(namespace),
                obj=who,
                query=_STRICT,
                body={**manifest, "apiVersion": resource.api_version},
            )
            if response.ok:
                created: dict[str, Any] = response.json()
                return created
            if _already_exists(response):
                return await self._get(resource, name, namespace)
            if response.status == 404:
                raise _not_created(response, resource, who, namespace=namespace)
            raise response.error(who)

        return await self._retrying(create)

    async def copies_of(self, origins: Collection[str]) -> list[WorkloadCopy]:
        """The copies here of workloads from clusters `origins` (MultiKueue): Jobs, JobSets
        and Kueue Workloads labelled with one of them as their origin, sorted."""
        if not origins:
            return []
        selector = f"{copies.ORIGIN_LABEL} in ({','.join(sorted(origins))})"
        found: list[WorkloadCopy] = []
        for resource in (JOBS, JOBSETS, self._kueue["Workload"]):
            try:
                items = await self._list(resource, labelSelector=selector)
            except NotFoundError:
                continue  # its CRD (JobSet's, Kueue's) not installed here: no copies of it
            for obj in items:
                key = copies.copied_workload(obj)
                if key:
                    found.append(WorkloadCopy(workload=key, origin=copies.origin_of(obj)))
        return sorted(set(found))

    async def probe(self) -> ClusterError | None:
        """One list of one Namespace (the cheapest read every muster role may make), no
        retry: None when answered, else why not."""
        try:
            response = await self.transport.request(
                "GET", NAMESPACES.collection_path(), obj="", query=[("limit", 1)]
            )
        except ClusterError as err:
            return err
        return None if response.ok else response.error("")

    async def _job_of(
        self, namespace: str, name: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(the Job workload `name` stands for, the Kueue Workload `name`), each None if absent.

        Tried in turn: the Job name Kueue's naming implies, the Kueue Workload's controller
        owner, and the queued Jobs of the namespace (a long Job name is cut in the Workload's).
        """
        if name.startswith("job-") and len(name) > len("job--12345"):
            guess = await self._get_or_none(JOBS, name[len("job-") : -6], namespace)
            if guess is not None and name in (jobs.workload_name(guess), _prebuilt(guess)):
                return guess, None  # the Job, or its copy from another cluster
        workload = await self._get_or_none(self._kueue["Workload"], name, namespace)
        owner = _controller(workload) if workload is not None else None
        if owner is not None and owner.get("kind") == "Job":
            job = await self._get_or_none(JOBS, str(owner.get("name")), namespace)
            if job is not None and (job.get("metadata") or {}).get("uid") == owner.get("uid"):
                return job, workload
        if workload is None and name.startswith("job-"):
            for job in await self._list(JOBS, namespace=namespace, labelSelector=QUEUE_NAME_KEY):
                if name in (jobs.workload_name(job), _prebuilt(job)):
                    return job, None
        return None, workload

    async def _jobset_of(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The JobSet workload `name` stands for (`jobset-<name>-<hash>`; a copy from another
        cluster by its `kueue.x-k8s.io/prebuilt-workload-name`, its uid being its own), None if
        none: the JobSet that name implies, else the queued JobSets of the namespace (a long
        name is cut in the Workload's)."""
        if not name.startswith("jobset-"):
            return None
        try:
            guess = await self._get_or_none(JOBSETS, name[len("jobset-") : -6], namespace)
            if guess is not None and name in (jobsets.workload_name(guess), _prebuilt(guess)):
                return guess  # the JobSet, or its copy from another cluster
            found = await self._list(JOBSETS, namespace=namespace, labelSelector=QUEUE_NAME_KEY)
        except NotFoundError:  # JobSets not served here (the 404 of a list)
            return None
        return next(
            (js for js in found if name in (jobsets.workload_name(js), _prebuilt(js))), None
        )

    async def _start_jobset(
        self,
        jobset: Mapping[str, Any],
        pod_sets: Sequence[PodSetStart],
        *,
        workload: str,
        admission: int,
    ) -> None:
        """Unsuspend `jobset` with its podsets' placement (`jobsets.started_jobset`), one write;
        its controller passes them on to its Jobs."""
        js_name, namespace, path, who = _where(JOBSETS, jobset)
        current: Mapping[str, Any] | None = jobset
        classes = await self._runtime_classes(jobset, pod_sets)

        async def start() -> None:
            nonlocal current
            fresh = current if current is not None else await self._get(JOBSETS, js_name, namespace)
            current = None  # a retry reads again
            try:
                started = jobsets.started_jobset(
                    fresh,
                    pod_sets,
                    workload=workload,
                    admission=admission,
                    runtime_classes=classes,
                )
            except ResizeError as err:
                message = f"its pod templates cannot ask for the admitted requests: {err}"
                raise RequestsRefusedError(who, message) from None
            if started is not None:
                await self.transport.checked("PUT", path, obj=who, query=_STRICT, body=started)

        await self._retrying(start)

    async def _stop_jobset(self, jobset: Mapping[str, Any]) -> None:
        """Suspend `jobset`, its templates put back as its owner wrote them, in one write."""
        js_name, namespace, path, who = _where(JOBSETS, jobset)

        async def stop() -> None:
            suspended = jobsets.suspended_jobset(await self._get(JOBSETS, js_name, namespace))
            if suspended is not None:
                await self.transport.checked("PUT", path, obj=who, query=_STRICT, body=suspended)

        await self._retrying(stop)

    async def _start_job(
        self,
        job: Mapping[str, Any],
        pod_sets: Sequence[PodSetStart],
        *,
        workload: str,
        admission: int,
    ) -> None:
        job_name, namespace, path, who = _where(JOBS, job)
        current: Mapping[str, Any] | None = job
        classes = await self._runtime_classes(job, pod_sets)

        async def start() -> None:
            nonlocal current
            fresh = current if current is not None else await self._get(JOBS, job_name, namespace)
            current = None  # a retry reads again
            if jobs.is_suspended(fresh) and (fresh.get("status") or {}).get("startTime"):
                fresh = await self._clear_start_time(job_name, namespace)  # else no template change
            try:
                started = jobs.started_job(
                    fresh,
                    pod_sets,
                    workload=workload,
                    admission=admission,
                    runtime_classes=classes,
                )
            except ResizeError as err:
                message = f"its pod template cannot ask for the admitted requests: {err}"
                raise RequestsRefusedError(who, message) from None
            if started is None:
                return
            # One write: the new requests and the unsuspend together (KEP-5440's advice), so
            # a refusal leaves the Job suspended as it was, never running with other requests.
            try:
                await self.transport.checked("PUT", path, obj=who, query=_STRICT, body=started)
            except ClusterError as err:
                refused = isinstance(err, InvalidObjectError) or err.reason == "Forbidden"
                if not refused or not jobs.resources_changed(fresh, started):
                    raise
                message = f"the API server refused to change its pod template's resources: {err}"
                raise RequestsRefusedError(who, message) from err

        await self._retrying(start)

    async def _stop_job(self, job: Mapping[str, Any]) -> None:
        job_name, namespace, path, who = _where(JOBS, job)

        async def stop() -> None:
            current = await self._get(JOBS, job_name, namespace)
            suspended = jobs.suspended_job(current)
            if suspended is not None:
                current = await self.transport.checked(
                    "PUT", path, obj=who, query=_STRICT, body=suspended
                )
            if (current.get("status") or {}).get("startTime"):
                current = await self._clear_start_time(job_name, namespace)
            restored = jobs.restored_job(current)
            if restored is None:
                return
            try:
                await self.transport.checked("PUT", path, obj=who, query=_STRICT, body=restored)
            except InvalidObjectError as err:
                active = (current.get("status") or {}).get("active") or 0
                if active and jobs.resources_changed(current, restored):
                    # Its resources may change once the Job controller has removed its pods
                    # (KEP-5440): until then the Job holds its quota, as Kueue's does.
                    raise ClusterError(
                        who,
                        "Invalid",
                        f"waiting for its {active} active pods to stop",
                        temporary=True,
                    ) from err
                log.warning("cannot restore the pod template of %s: %s", who, err)

        await self._retrying(stop)

    async def _clear_start_time(self, job_name: str, namespace: str) -> dict[str, Any]:
        """Clear a suspended Job's status.startTime, as Kueue does so its template may change."""
        job: dict[str, Any] = await self.transport.checked(
            "PATCH",
            JOBS.object_path(job_name, namespace, "status"),
            obj=JOBS.describe(job_name, namespace),
            body={"status": {"startTime": None}},
            content_type=MERGE_PATCH,
        )
        return job

    async def _create_pods(
        self,
        workload: Mapping[str, Any],
        pod_sets: Sequence[PodSetStart],
        *,
        admission: int,
        nodes: Mapping[str, str] | None = None,
    ) -> None:
        """Create the pods of a bare Kueue Workload from its podset templates (idempotent);
        with `nodes`, only those it names, each on its node."""
        templates = {
            ps.get("name"): ps.get("template") or {}
            for ps in (workload.get("spec") or {}).get("podSets") or []
        }
        name = str((workload.get("metadata") or {}).get("name"))
        classes = await self._runtime_classes(workload, pod_sets)
        try:
            pods = [
                _pod(
                    workload,
                    ps,
                    i,
                    template=templates.get(ps.name) or {},
                    scheduler=self.config.scheduler_name,
                    admission=admission,
                    node=nodes[pod] if nodes is not None else "",
                    runtime_classes=classes,
                )
                for ps in pod_sets
                for i in range(ps.count)
                if nodes is None or (pod := pod_name(name, ps.name, i)) in nodes
            ]
        except ResizeError as err:
            meta = workload.get("metadata") or {}
            name, namespace = str(meta.get("name")), str(meta.get("namespace"))
            who = self._kueue["Workload"].describe(name, namespace)
            message = f"its podset template cannot ask for the admitted requests: {err}"
            raise RequestsRefusedError(who, message) from None
        # Every pod is made first, so a podset that cannot be resized creates none; then they
        # are written a batch at a time (cluster/batches.py).
        await run_in_batches(pods, self.create if nodes is None else self._create_placed)

    async def _create_placed(self, pod: dict[str, Any]) -> None:
        """Create `pod` on its node; one of its name already there must be its admission's."""
        if not await self.create(pod):
            meta = pod["metadata"]
            found = await self._get_or_none(PODS, meta["name"], meta["namespace"])
            if found is None:
                return
            refuse_leftover(found, pod)
            node = pod["spec"]["nodeName"]
            if (found.get("spec") or {}).get("nodeName") != node:  # not unbound, nor elsewhere
                uid = str((found.get("metadata") or {}).get("uid") or "")
                await self.bind(meta["namespace"], meta["name"], node, uid=uid)

    async def _pods_of(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The pods of workload or pod group `name`: labelled with it, or (a Workload API pod
        group "<workload>/<podGroup>[/<replica>]") referring to it."""
        if "/" in name:
            ref = name.split("/")
            return [
                p for p in await self._list(PODS, namespace=namespace) if _workload_ref(p) == ref
            ]
        labelled = await self._list(
            PODS, namespace=namespace, labelSelector=f"{WORKLOAD_LABEL}={name}"
        )
        grouped = await self._list(
            PODS, namespace=namespace, labelSelector=f"{POD_GROUP_LABEL}={name}"
        )
        by_name = {p["metadata"]["name"]: p for p in (*labelled, *grouped)}
        return [by_name[n] for n in sorted(by_name)]

    async def bind(self, namespace: str, pod: str, node: str, *, uid: str = "") -> None:
        who = PODS.describe(pod, namespace)
        meta = {"name": pod, "namespace": namespace, **({"uid": uid} if uid else {})}
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,  # with a uid: the server binds only that pod (a precondition)
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }

        async def bind() -> None:
            response = await self.transport.request(
                "POST", PODS.object_path(pod, namespace, "binding"), obj=who, body=binding
            )
            if response.ok:
                return
            if response.status == 404:
                raise NotFoundError(who)
            if response.status != 409:
                raise response.error(who)
            # Already bound, being deleted, or gated: which one, the pod says.
            current = await self._get(PODS, pod, namespace)
            bound_to = (current.get("spec") or {}).get("nodeName") or ""
            if bound_to == node:
                return
            if bound_to:
                raise BindConflictError(who, bound_to=bound_to, wanted=node)
            raise ClusterError(who, "Conflict", response.error(who).message)

        await self._retrying(bind)


def _where(resource: Resource, owner: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """`owner`'s name and namespace, its object path, and how an error names it: what starting
    or stopping a Job or JobSet opens with."""
    meta = owner.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    path, who = resource.object_path(name, namespace), resource.describe(name, namespace)
    return name, namespace, path, who


def _already_exists(response: Response) -> bool:
    return response.status == 409 and b'"AlreadyExists"' in response.body


def _not_created(
    response: Response, resource: Resource, who: str, *, namespace: str
) -> ClusterError:
    """Why a create was answered 404: its namespace does not exist (the API server's Status
    names `namespaces`), or the cluster does not serve `resource` at all (its "404 page not
    found": a CRD not installed), each said as such."""
    try:
        status = response.json()
    except msgspec.DecodeError:
        status = None
    details = status.get("details") if isinstance(status, dict) else None
    if isinstance(details, dict) and details.get("kind") == "namespaces":
        message = f"namespace {namespace} does not exist in this cluster"
        return ClusterError(who, "NamespaceNotFound", message)
    served = f"{resource.plural}.{resource.group or 'core'}/{resource.version}"
    if resource.group.endswith(".k8s.io") or "." not in resource.group:
        return ClusterError(who, "NotServed", f"{served} is not served by this cluster")
    message = f"the {resource.kind} CRD ({served}) is not installed in this cluster"
    return ClusterError(who, "NotServed", message)


# The owners a MultiKueue copy is made of (`copies.owner_copy`): their resource, and how
# their copy is created started.
_COPIED_OWNERS: Mapping[str, tuple[Resource, Callable[..., dict[str, Any] | None]]] = {
    "Job": (JOBS, jobs.started_job),
    "JobSet": (JOBSETS, jobsets.started_jobset),
}


def _prebuilt(job: Mapping[str, Any]) -> str:
    """The Kueue Workload a copied Job or JobSet stands for ("" for one of this cluster's
    own)."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    return str(labels.get(copies.PREBUILT_WORKLOAD_LABEL) or "") if copies.origin_of(job) else ""


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def _workload_ref(pod: Mapping[str, Any]) -> list[str]:
    ref = (pod.get("spec") or {}).get("workloadRef") or {}
    parts = [str(ref.get("name", "")), str(ref.get("podGroup", ""))]
    replica = ref.get("podGroupReplicaKey")
    return [*parts, str(replica)] if replica else parts


def _pod(
    workload: Mapping[str, Any],
    pod_set: PodSetStart,
    index: int,
    *,
    template: Mapping[str, Any],
    scheduler: str,
    admission: int = 0,
    node: str = "",
    runtime_classes: RuntimeOverheads = NO_RUNTIME_CLASSES,
) -> dict[str, Any]:
    """Pod `index` of `pod_set` from the Workload's template, placed as admitted (and, with
    `node`, created on that node: the API server takes `spec.nodeName` on create); a routed
    podset's with the alternative's requests (`resize`; `runtime_classes` as it takes them)."""
    meta = workload.get("metadata") or {}
    name = str(meta.get("name"))
    t_meta = template.get("metadata") or {}
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    if pod_set.routed:
        spec = resized(spec, pod_set.requests, runtime_classes=runtime_classes) or spec
    spec["schedulerName"] = scheduler
    if pod_set.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **pod_set.node_selector}
    tolerations = list(spec.get("tolerations") or [])
    for t in map(jobs.toleration_manifest, pod_set.tolerations):
        if t not in tolerations:
            tolerations.append(t)
    if tolerations:
        spec["tolerations"] = tolerations
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name, pod_set.name, index),
            "namespace": meta.get("namespace"),
            "labels": {
                **(t_meta.get("labels") or {}),
                **pod_set.labels,
                WORKLOAD_LABEL: name,
                **({ADMISSION_LABEL: str(admission)} if admission else {}),
            },
            "annotations": {
                **(t_meta.get("annotations") or {}),
                **pod_set.annotations,
                POD_SET_ANNOTATION: pod_set.name,
            },
            "ownerReferences": [
                {
                    "apiVersion": workload.get("apiVersion"),
                    "kind": "Workload",
                    "name": name,
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def _view(parse: Callable[[Mapping[str, Any]], V], obj: Mapping[str, Any]) -> V | None:
    """The view of one listed object; one that will not decode is logged and skipped."""
    try:
        return parse(obj)
    except msgspec.ValidationError as exc:
        meta = obj.get("metadata") or {}
        log.warning(
            "skipping undecodable object",
            extra={"key": f"{meta.get('namespace', '')}/{meta.get('name', '')}", "error": str(exc)},
        )
        return None


if TYPE_CHECKING:

    def _conforms(backend: KubeBackend) -> ClusterBackend:
        return backend  # mypy checks KubeBackend against the protocol here
