"""KubeBackend: the ClusterBackend of a real cluster, over the official `kubernetes` client.

Watch side: `informer.merged_watch` over `resources.watched_sources`. Binder side: a Job a
Kueue Workload stands for is started and stopped as Kueue does (`job_writes`); a bare Kueue
Workload gets its pods from its podset templates (muster is its controller: `pod_writes`); a
pod group's pods exist already; a MultiKueue copy is created and deleted here
(`copy_writes`). What a workload name stands for is found by `workload_objects`. Binding uses
the `pods/binding` subresource. Writes are paced by a token bucket and retried (409 Conflict
re-reads) before a ClusterError leaves (`api_objects`); every client failure is mapped in
`transport`, so no kubernetes or aiohttp exception gets out.

This class is the one entry from outside `cluster/kube` to these modules (import-linter).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from muster.api.job import QUEUE_NAME_KEY
from muster.api.resource import Resource
from muster.bus.progress import advanced
from muster.cluster.backend import (
    ClusterBackend,
    ClusterChange,
    Identity,
    PodSetStart,
    Selection,
    WorkloadCopy,
    WorkloadOrigin,
    admission_of,
    split_workload_key,
)
from muster.cluster.batches import run_in_batches
from muster.cluster.errors import ClusterError, NotFoundError
from muster.cluster.kube import copies, jobs, jobsets
from muster.cluster.kube.api_objects import NAMESPACED_DEFAULT, STRICT, ApiObjects
from muster.cluster.kube.config import api_client
from muster.cluster.kube.copy_writes import COPIED_OWNERS, copies_from, create_copy_of
from muster.cluster.kube.discovery import GangApi
from muster.cluster.kube.informer import SEQ_BITS, merged_watch, resource_version_now
from muster.cluster.kube.job_writes import JOB, JOBSET, start_owner, stop_job, stop_jobset
from muster.cluster.kube.pod_writes import bind_pod, create_pods
from muster.cluster.kube.ratelimit import TokenBucket
from muster.cluster.kube.resources import (
    JOBS,
    JOBSETS,
    NAMESPACES,
    NODES,
    PODS,
    kueue_resources,
    resource_for_kind,
    watched_sources,
)
from muster.cluster.kube.retry import cancelling_check
from muster.cluster.kube.settings import KubeConfig
from muster.cluster.kube.transport import Transport
from muster.cluster.kube.workload_objects import job_of, jobset_of, pods_of
from muster.cluster.objects import NodeView, PodView, node_view, pod_view
from muster.cluster.pod_set_updates import with_check_updates

log = logging.getLogger(__name__)
V = TypeVar("V")


class KubeBackend:
    """A Kubernetes cluster behind the ClusterBackend protocol."""

    def __init__(self, transport: Transport, *, config: KubeConfig) -> None:
        problems = config.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.transport = transport
        self.config = config
        self.objects = ApiObjects(transport, config=config)
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

    # --- objects ------------------------------------------------------------------------------

    async def apply(
        self,
        manifest: Mapping[str, Any],
        *,
        as_user: Identity | None = None,
        field_validation: str = STRICT,
    ) -> None:
        """As the protocol says (`ApiObjects.apply`)."""
        await self.objects.apply(manifest, as_user=as_user, field_validation=field_validation)

    async def create(
        self,
        manifest: Mapping[str, Any],
        *,
        as_user: Identity | None = None,
        field_validation: str = STRICT,
    ) -> bool:
        return await self.objects.create(
            manifest, as_user=as_user, field_validation=field_validation
        )

    async def delete(
        self,
        kind: str,
        name: str,
        *,
        namespace: str = "",
        uid: str = "",
        as_user: Identity | None = None,
    ) -> bool:
        resource, namespace = self._resource_of(kind, namespace)
        return await self.objects.delete(resource, name, namespace, uid=uid, as_user=as_user)

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
        resource, namespace = self._resource_of(kind, namespace)
        await self.objects.merge_patch(resource, name, namespace, patch, as_user=as_user)

    def _resource_of(self, kind: str, namespace: str) -> tuple[Resource, str]:
        """The resource of `kind`, and the namespace an object of it is in ("default" when a
        namespaced one names none)."""
        resource = resource_for_kind(kind, kueue_version=self.config.kueue_version)
        return resource, (namespace or NAMESPACED_DEFAULT) if resource.namespaced else ""

    async def list_nodes(self) -> list[NodeView]:
        views = [_view(node_view, obj) for obj in await self.objects.listed(NODES)]
        return sorted((v for v in views if v is not None), key=lambda v: v.name)

    async def list_pods(self) -> list[PodView]:
        views = [_view(pod_view, obj) for obj in await self.objects.listed(PODS)]
        return sorted((v for v in views if v is not None), key=lambda v: (v.namespace, v.name))

    async def list_workload_objects(self) -> list[dict[str, Any]]:
        """As the protocol says: what `watched_sources` follows of them (Jobs by the queue
        label), and no Kueue Workloads where Kueue's CRDs are not installed."""
        objects = await self.objects.listed(JOBS, labelSelector=QUEUE_NAME_KEY)
        with contextlib.suppress(NotFoundError):  # no CRD: no JobSet to run
            objects += await self.objects.listed(JOBSETS, labelSelector=QUEUE_NAME_KEY)
        workloads = kueue_resources(self.config.kueue_version)["Workload"]
        with contextlib.suppress(NotFoundError):  # no CRD: no Kueue Workload stands for one
            objects += await self.objects.listed(workloads)
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
                return await self.objects.retrying(self.gang_api.resources)
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
        rv = await self.objects.retrying(lambda: resource_version_now(self.transport))
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
        api = self.objects
        namespace, name = split_workload_key(workload_key)
        jobset = await jobset_of(api, namespace, name)
        if jobset is not None:
            workload = await api.get_or_none(self.objects.kueue["Workload"], name, namespace)
            await start_owner(
                api,
                JOBSET,
                jobset,
                with_check_updates(pod_sets, workload, what=workload_key, owner=jobset),
                workload=name,
                admission=admission,
            )
            return
        job, workload = await job_of(api, namespace, name)
        if job is not None and workload is None:
            workload = await api.get_or_none(self.objects.kueue["Workload"], name, namespace)
        # Its checks' asks, over what its pods carry: the Job's template, else the Workload's.
        pod_sets = with_check_updates(pod_sets, workload, what=workload_key, owner=job)
        if nodes is not None:
            self._refuse_placed(name, namespace, job=job, workload=workload, origin=origin)
        if job is None and workload is None and origin is not None:
            job, workload = await create_copy_of(api, namespace, name, origin, pod_sets, admission)
            if job is not None:
                return  # created started
        if job is not None:
            await start_owner(api, JOB, job, pod_sets, workload=name, admission=admission)
        elif workload is not None:
            await create_pods(api, workload, pod_sets, admission=admission, nodes=nodes)
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
        if kind in COPIED_OWNERS:
            why = f"its pods are its {kind}'s, created by the {kind} controller"
        elif workload is None and origin is None:
            why = (
                "no Kueue Workload or Job of that name here: its pods are a pod group's, made by "
                "whoever applied them"
            )
        else:
            return
        who = self.objects.kueue["Workload"].describe(name, namespace)
        raise ClusterError(who, "Invalid", f"cannot create its pods on their nodes: {why}")

    async def stop_workload(
        self, workload_key: str, *, before: int = 0, pod_sets: Mapping[str, int] | None = None
    ) -> None:
        """A Job is suspended (unless a later admission started it); other pods are found by
        label (the API server's index), so `pod_sets` is not needed here. A copy from another
        cluster (MultiKueue) is deleted, as Kueue deletes remote objects, so nothing of it can
        run here again."""
        api = self.objects
        namespace, name = split_workload_key(workload_key)
        jobset = await jobset_of(api, namespace, name)
        if jobset is not None:  # suspended, or a copy deleted: its Jobs go with their pods
            if before and jobsets.admission_of_jobset(jobset) >= before:
                return  # started by a later admission than the eviction's
            if copies.origin_of(jobset):
                meta = jobset["metadata"]
                uid = str(meta.get("uid", ""))
                await api.delete(JOBSETS, str(meta["name"]), namespace, uid=uid)
            else:
                await stop_jobset(api, jobset)
            return
        job, workload = await job_of(api, namespace, name)
        if job is not None:
            if before and jobs.admission_of_job(job) >= before:
                return  # started by a later admission than the eviction's
            if not copies.origin_of(job):
                await stop_job(api, job)
                return
            meta = job["metadata"]
            await api.delete(JOBS, str(meta["name"]), namespace, uid=str(meta.get("uid", "")))
        found = await pods_of(api, namespace, name)
        pods = [p for p in found if not before or admission_of(p) < before]

        async def delete(pod: dict[str, Any]) -> None:
            meta = pod["metadata"]
            await api.delete(PODS, meta["name"], namespace, uid=meta.get("uid", ""))

        await run_in_batches(pods, delete)
        if workload is not None and copies.origin_of(workload) and len(pods) == len(found):
            await api.delete(
                self.objects.kueue["Workload"], name, namespace
            )  # no later admission's

    async def copies_of(self, origins: Collection[str]) -> list[WorkloadCopy]:
        """The copies here of workloads from clusters `origins` (`copy_writes.copies_from`)."""
        return await copies_from(self.objects, origins)

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

    async def bind(self, namespace: str, pod: str, node: str, *, uid: str = "") -> None:
        await bind_pod(self.objects, namespace, pod, node, uid=uid)


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
