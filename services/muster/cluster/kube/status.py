"""StatusWriter: keeps the status of Kueue objects in the cluster equal to what muster decided,
so `kubectl get clusterqueue`, `kubectl get workloads` and `kubectl describe workload` tell
the truth; and the Kueue Workload muster creates for a queued Job.

`desire(ref, status)` records the whole status muster wants for one object and returns at
once. Writers send the latest desired status of each object through the `status` subresource
as a JSON merge patch (one request, no read; the fields muster owns and no longer wants are
sent as null), paced by a token bucket: desires that arrive while an object waits for its turn
replace each other, so N desires cost at most a few writes. Temporary failures (429, 5xx,
conflicts, lost connections) are retried with back-off; an object that no longer exists is
dropped.

A Workload's `status.admissionChecks` is shared with the check controllers, so it is never
part of the merge patch: when what muster wants of it changes (`ChecksWanted`: the checks a
reservation requires, the last eviction), the write reads the object first and sends the list
with the entries muster adds or resets, under the object's resourceVersion (a controller's
write in between makes it 409, read again and retried): nobody's entry is ever overwritten.

A Workload's `status.clusterName` is immutable once set (Kueue's CRD; it may be unset, then set
anew): a move between workers is written as an unset, then the new worker. A writer that does
not know what is stored (restarted, or after a refusal) learns it from the refusal: it reads the
object, and when the stored clusterName names another worker, writes the unset first.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import msgspec

from muster.api.check_states import ChecksWanted, entries_of, format_time, wanted_entries
from muster.api.encode import workload_to_kueue
from muster.api.errors import ObjectErrors
from muster.api.job import workload_from_job
from muster.api.jobset import JOBSET_KIND, workload_from_jobset
from muster.api.raw import RawJob, RawJobSet
from muster.bus.supervision import supervised
from muster.cluster.errors import ClusterError, InvalidObjectError, NotFoundError
from muster.cluster.kube.discovery import GangApi
from muster.cluster.kube.ratelimit import TokenBucket
from muster.cluster.kube.resources import JOBS, JOBSETS, KUEUE_GROUP, ObjectRef, kueue_resources
from muster.cluster.kube.retry import retrying
from muster.cluster.kube.settings import StatusWriterSettings
from muster.cluster.kube.transport import MERGE_PATCH, Transport

log = logging.getLogger(__name__)

# Status fields muster owns per Kueue kind: when a desired status lacks one, it is cleared.
OWNED_STATUS_FIELDS: Mapping[str, tuple[str, ...]] = {
    # Not admissionChecks: the check controllers write it too (`check_states`).
    "Workload": ("conditions", "admission", "requeueState", "clusterName"),
    # Its Active condition: whether the services serving that worker reach it.
    "MultiKueueCluster": ("conditions",),
    "ClusterQueue": (
        "conditions",
        "pendingWorkloads",
        "reservingWorkloads",
        "admittedWorkloads",
        "flavorsReservation",
        "flavorsUsage",
        "fairSharing",
    ),
    "LocalQueue": (
        "conditions",
        "pendingWorkloads",
        "reservingWorkloads",
        "admittedWorkloads",
        "flavorsReservation",
        "flavorsUsage",
        "flavorUsage",  # v1beta1's name of flavorsUsage
    ),
    # scheduling.k8s.io PodGroup (the version the server serves: `discovery`).
    "PodGroup": ("conditions",),
    # A batch/v1 Job MultiKueue manages (spec.managedBy): its copy's whole status, mirrored.
    "Job": (
        "active",
        "ready",
        "terminating",
        "succeeded",
        "failed",
        "startTime",
        "completionTime",
        "conditions",
        "completedIndexes",
        "failedIndexes",
        "uncountedTerminatedPods",
    ),
    # A JobSet MultiKueue manages (spec.managedBy): its copy's whole status, mirrored.
    "JobSet": (
        "conditions",
        "restarts",
        "restartsCountTowardsMax",
        "terminalState",
        "replicatedJobsStatus",
    ),
}
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class _Desired(NamedTuple):
    status: dict[str, Any]
    checks: ChecksWanted | None


class StatusWriterStats(msgspec.Struct, kw_only=True):
    desired: int = 0  # desire() calls
    writes: int = 0  # status writes that succeeded
    skipped: int = 0  # desired statuses equal to the one written last
    retries: int = 0  # writes that failed temporarily and were tried again
    dropped: int = 0  # objects gone, or statuses the server refused


def completed_conditions(
    conditions: Iterable[Mapping[str, Any]],
    previous: Iterable[Mapping[str, Any]],
    *,
    now: str,
) -> list[dict[str, Any]]:
    """`conditions` with what metav1.Condition requires filled in: lastTransitionTime kept
    from the previous condition of that type while its status is the same (else `now`),
    reason (the type when none) and message ("")."""
    before = {c.get("type"): c for c in previous}
    out = []
    for condition in conditions:
        filled = dict(condition)
        old = before.get(filled.get("type"))
        if "lastTransitionTime" not in filled:
            same = old is not None and old.get("status") == filled.get("status")
            filled["lastTransitionTime"] = (
                old.get("lastTransitionTime", now) if same and old else now
            )
        filled.setdefault("reason", filled.get("type", ""))
        filled.setdefault("message", "")
        out.append(filled)
    return out


def _moves_cluster(previous: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether `status` names another worker than the written `previous` did (a Workload's
    status.clusterName, both set)."""
    was, now = previous.get("clusterName"), status.get("clusterName")
    return bool(was and now and was != now)


class StatusWriter:
    """Coalescing, rate-limited status writes for Kueue objects (see the module docstring).

    Needs a running event loop from the first `desire` on; `close` stops it (after `flush`,
    to write what is pending).
    """

    def __init__(
        self,
        transport: Transport,
        *,
        kueue_version: str = "v1beta1",
        settings: StatusWriterSettings | None = None,
        clock: Callable[[], float] = time.time,
        gang_api: GangApi | None = None,
    ) -> None:
        settings = settings or StatusWriterSettings()
        self._transport = transport
        self._gang_api = gang_api if gang_api is not None else GangApi(transport)
        self._resources = {**kueue_resources(kueue_version), "Job": JOBS, "JobSet": JOBSETS}
        self._kueue_version = kueue_version
        self._bucket = TokenBucket(settings.qps, settings.burst)
        self._concurrency = settings.concurrency
        self._backoff = settings.backoff
        self._clock = clock
        self._desired: dict[ObjectRef, _Desired] = {}
        self._written: dict[ObjectRef, dict[str, Any]] = {}
        self._checks_written: dict[ObjectRef, ChecksWanted] = {}
        self._ready: deque[ObjectRef] = deque()  # refs waiting for a writer, each once
        self._waiting: set[ObjectRef] = set()  # in _ready, in flight, or backing off
        self._failures: dict[ObjectRef, int] = {}
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()  # nothing waiting
        self._drained.set()
        self._workers: list[asyncio.Task[None]] = []
        self.stats = StatusWriterStats()

    # --- the caller's side --------------------------------------------------------------------

    def desire(
        self, ref: ObjectRef, status: Mapping[str, Any], *, checks: ChecksWanted | None = None
    ) -> None:
        """Make `status` the status `ref` should have, and `checks` what its check list
        should hold (a Workload's; None: leave it alone); returns at once, writes later."""
        if ref.kind not in OWNED_STATUS_FIELDS:
            raise ValueError(f"muster writes no status of kind {ref.kind}")
        self.stats.desired += 1
        self._desired[ref] = _Desired(copy.deepcopy(dict(status)), checks)
        if ref not in self._waiting:
            self._enqueue(ref)
        self._start()

    async def flush(self, *, timeout_s: float = 10.0) -> None:
        """Wait until every desired status is written (or dropped); TimeoutError past it."""
        async with asyncio.timeout(timeout_s):
            await self._drained.wait()

    async def close(self) -> None:
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()

    def pending(self) -> int:
        """Objects whose desired status is not written yet."""
        return len(self._waiting)

    # --- writers ------------------------------------------------------------------------------

    def _start(self) -> None:
        if not self._workers:
            self._workers = [
                supervised(self._work(), name=f"status-writer-{i}")
                for i in range(self._concurrency)
            ]

    def _enqueue(self, ref: ObjectRef) -> None:
        self._waiting.add(ref)
        self._ready.append(ref)
        self._drained.clear()
        self._wake.set()

    async def _work(self) -> None:
        while True:
            while not self._ready:
                self._wake.clear()
                await self._wake.wait()
            ref = self._ready.popleft()
            # The token first: desires arriving meanwhile are folded into this write.
            await self._bucket.acquire()
            desired = self._desired.pop(ref, None)
            retry_in_s = None if desired is None else await self._write(ref, desired)
            if retry_in_s is not None:
                asyncio.get_running_loop().call_later(retry_in_s, self._enqueue_again, ref)
            elif ref in self._desired:
                self._ready.append(ref)  # desired again while being written
            else:
                self._waiting.discard(ref)
                if not self._waiting:
                    self._drained.set()

    def _enqueue_again(self, ref: ObjectRef) -> None:
        self._ready.append(ref)
        self._wake.set()

    async def _write(self, ref: ObjectRef, desired: _Desired) -> float | None:
        """Write one status; the delay before trying again, or None when done with it."""
        status, checks = desired
        previous = self._written.get(ref, {})
        if "conditions" in status:
            status["conditions"] = completed_conditions(
                status["conditions"],
                previous.get("conditions", ()),
                now=format_time(self._clock()),
            )
        if _moves_cluster(previous, status):
            # Kueue's CRD: clusterName is immutable once set, though it may be unset (an
            # eviction does) and set anew. Desires that coalesced from one worker to another
            # are written in two: unset now, the new worker next (a newer desire wins).
            self._desired.setdefault(ref, desired)
            status = {f: v for f, v in status.items() if f != "clusterName"}
        checks_due = checks is not None and checks != self._checks_written.get(ref)
        if ref in self._written and status == previous and not checks_due:
            self.stats.skipped += 1
            return None
        patch: dict[str, Any] = {f: None for f in OWNED_STATUS_FIELDS[ref.kind]}
        patch.update({f: None for f in previous})
        patch.update(status)
        body: dict[str, Any] = {"status": patch}
        resource = self._resources.get(ref.kind)
        if resource is None:  # a PodGroup: the version the server serves
            resource = (await self._gang_api.resources()).get(ref.kind)
            if resource is None:
                log.warning("dropping the status of %s: scheduling.k8s.io is not served", ref)
                self.stats.dropped += 1
                return None
        path = resource.object_path(ref.name, ref.namespace, "status")
        try:
            if checks_due and checks is not None:
                await self._add_checks(body, ref, path, checks)
            await self._transport.checked(
                "PATCH",
                path,
                obj=str(ref),
                body=body,
                content_type=MERGE_PATCH,
                paced=False,  # this writer's own bucket paced it
            )
        except (NotFoundError, InvalidObjectError) as err:
            if isinstance(err, InvalidObjectError) and await self._relearn_cluster(
                ref, path, status, previous
            ):
                self.stats.retries += 1
                self._desired.setdefault(ref, desired)  # through no cluster (a newer desire wins)
                return None
            log.warning("dropping the status of %s: %s", ref, err)
            self.stats.dropped += 1
            self._written.pop(ref, None)
            self._checks_written.pop(ref, None)
            self._failures.pop(ref, None)
            return None
        except ClusterError as err:
            if not err.temporary:
                log.error("dropping the status of %s: %s", ref, err)
                self.stats.dropped += 1
                return None
            failures = self._failures[ref] = self._failures.get(ref, 0) + 1
            self.stats.retries += 1
            self._desired.setdefault(ref, desired)  # a newer desire wins
            return self._backoff.wait_s(self._backoff.delay_s(failures), err)
        self._failures.pop(ref, None)
        self._written[ref] = status
        if checks is not None:
            self._checks_written[ref] = checks
        self.stats.writes += 1
        return None

    async def _relearn_cluster(
        self, ref: ObjectRef, path: str, status: Mapping[str, Any], previous: Mapping[str, Any]
    ) -> bool:
        """After the server refused a write setting a Workload's clusterName: whether the
        stored one names another worker than this writer last wrote (it restarted, or dropped
        its record at an earlier refusal). If so, that worker becomes the record, so the
        next write unsets it first, as Kueue's CRD requires (see `_moves_cluster`)."""
        wanted = status.get("clusterName")
        if ref.kind != "Workload" or not wanted:
            return False
        try:
            current = await self._transport.checked("GET", path, obj=str(ref))
        except ClusterError as err:
            log.warning("reading the stored clusterName of %s: %s", ref, err)
            return False
        stored_status = current.get("status") if isinstance(current, Mapping) else None
        stored = stored_status.get("clusterName") if isinstance(stored_status, Mapping) else None
        if not isinstance(stored, str) or stored in ("", wanted, previous.get("clusterName")):
            return False  # refused for another reason
        log.info("%s names worker %s: unsetting it before naming %s", ref, stored, wanted)
        self._written[ref] = {**previous, "clusterName": stored}
        return True

    async def _add_checks(
        self, body: dict[str, Any], ref: ObjectRef, path: str, checks: ChecksWanted
    ) -> None:
        """Put into `body` the check list `checks` makes of the stored one, and the stored
        resourceVersion as the write's precondition; nothing when the list is as wanted."""
        current = await self._transport.checked("GET", path, obj=str(ref))
        entries = entries_of(current.get("status"))
        written = self._checks_written.get(ref)
        wanted = wanted_entries(entries, checks, now_s=self._clock(), written=written)
        if wanted != entries:
            body["status"]["admissionChecks"] = wanted
            rv = (current.get("metadata") or {}).get("resourceVersion", "")
            body["metadata"] = {"resourceVersion": rv}

    # --- Workload objects ---------------------------------------------------------------------

    async def create_workload_for_job(self, job: Mapping[str, Any]) -> str:
        """Create the Kueue Workload of a queued Job (controller ownerReference to the Job) and
        return its name; an existing one owned by the Job is left as it is.

        Raises InvalidObjectError when the Job does not make a Workload (with the Job's field
        paths), ClusterError on other failures.
        """
        manifest = workload_manifest(job, kueue_version=self._kueue_version)
        meta = manifest["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        resource = self._resources["Workload"]
        who = resource.describe(name, namespace)
        owner_uid = meta["ownerReferences"][0]["uid"]

        async def create() -> None:
            await self._bucket.acquire()
            response = await self._transport.request(
                "POST",
                resource.collection_path(namespace),
                obj=who,
                query=(("fieldValidation", "Strict"),),  # muster's own object: exactly right
                body=manifest,
                paced=False,
            )
            if response.ok:
                return
            if response.status != 409 or b'"AlreadyExists"' not in response.body:
                raise response.error(who)
            existing = await self._transport.checked(
                "GET", resource.object_path(name, namespace), obj=who
            )
            owners = (existing.get("metadata") or {}).get("ownerReferences") or []
            if not any(o.get("uid") == owner_uid for o in owners):
                raise ClusterError(who, "AlreadyExists", "exists and belongs to another object")

        await retrying(create, backoff=self._backoff)
        return str(name)


def workload_manifest(job: Mapping[str, Any], *, kueue_version: str) -> dict[str, Any]:
    """The Kueue Workload for `job` (a Job or a JobSet) as Kueue's integration makes it: named
    `job-<name>-<hash>` (`jobset-...`), queue and priority from the owner, its podsets (a Job's
    one "main", a JobSet's one per replicatedJob) whose templates are the owner's own pod
    templates, owned by it (controller)."""
    meta = job.get("metadata") or {}
    namespace, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
    kind = str(job.get("kind") or "Job")
    errs = ObjectErrors(f"{kind}/{namespace}/{name}")
    if not namespace or not name or not uid:
        raise InvalidObjectError(
            errs.obj, [f"metadata: a stored {kind} has a namespace, name and uid"]
        )
    jobset = kind == JOBSET_KIND
    try:
        workload = (
            workload_from_jobset(msgspec.convert(job, RawJobSet), errs, namespace=str(namespace))
            if jobset
            else workload_from_job(msgspec.convert(job, RawJob), errs, namespace=str(namespace))
        )
    except msgspec.ValidationError as err:
        raise InvalidObjectError(errs.obj, [str(err)]) from err
    if errs.errors:
        raise InvalidObjectError(errs.obj, [f"{e.path}: {e.problem}" for e in errs.errors])
    manifest = workload_to_kueue(workload, api_version=f"{KUEUE_GROUP}/{kueue_version}")
    out_meta = manifest["metadata"]
    for server_set in ("uid", "creationTimestamp"):
        out_meta.pop(server_set, None)
    out_meta.get("annotations", {}).pop(_LAST_APPLIED, None)
    for ref in out_meta["ownerReferences"]:
        ref["blockOwnerDeletion"] = True
    spec = job.get("spec") or {}
    templates = (
        [
            ((rj.get("template") or {}).get("spec") or {}).get("template")
            for rj in spec.get("replicatedJobs") or []
        ]
        if jobset
        else [spec.get("template")]
    )
    for pod_set, template in zip(manifest["spec"]["podSets"], templates, strict=False):
        if isinstance(template, Mapping):
            pod_set["template"] = copy.deepcopy(dict(template))
    return manifest
