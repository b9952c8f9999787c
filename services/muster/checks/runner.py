"""The shell of muster's admission check controllers (Kubernetes only; the watcher runs it).

One list-then-watch of what the controllers read (Kueue Workloads, AdmissionChecks and
ResourceFlavors, each controller's configuration kind and what it owns), kept in a cache; a
change marks the workloads it concerns (a Workload itself, an owned object its Workload, an
AdmissionCheck, configuration or flavor every workload with a check), and a worker reconciles
marked workloads one at a time once the first lists are complete: the controller's pure
`reconcile` says what to do, and this does it.

- Deletions (a gone object counts as deleted), then creations (an existing object of that
  name counts as created) and adoptions (the controller ownerReference moved to the new
  object).
- The checks' answers: one merge patch of the Workload's `status.admissionChecks` under the
  resourceVersion the answers were made from; a conflict (someone wrote since) waits for the
  watch to show the newer Workload, which is reconciled again.
- Notes become Kubernetes Events on the Workload (`NoteSink`).
- A failure reconciles the workload again after a back-off (a refusal also becomes a
  Warning Event); `recheck_after_s` reconciles it again after that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from muster.api import check_states
from muster.api.resource import Resource
from muster.bus.supervision import supervised
from muster.checks.framework import CheckController, Inputs, Plan, checks_for, config_of
from muster.cluster.backend import ClusterChange
from muster.cluster.errors import ClusterError, ConflictError, NotFoundError
from muster.cluster.kube.informer import SEQ_BITS, current_resource_version, merged_watch
from muster.cluster.kube.resources import Source, kueue_resources
from muster.cluster.kube.retry import Backoff
from muster.cluster.kube.settings import WatchSettings
from muster.cluster.kube.transport import MERGE_PATCH, Transport

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name) of a Workload


class NoteSink(Protocol):
    """Where a controller's notes go as Kubernetes Events (`muster.cluster.kube.events`)."""

    def record(
        self, regarding: Mapping[str, Any], *, type_: str, reason: str, note: str, action: str
    ) -> None: ...


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _controlling_workload(obj: Mapping[str, Any]) -> Key | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "Workload":
            return str((obj.get("metadata") or {}).get("namespace", "")), str(ref.get("name"))
    return None


class CheckRunner:
    """Runs `controllers` against the API server behind `transport` until cancelled."""

    def __init__(
        self,
        transport: Transport,
        controllers: Sequence[CheckController],
        *,
        kueue_version: str,
        watch: WatchSettings | None = None,
        notes: NoteSink | None = None,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._transport = transport
        self._controllers = list(controllers)
        kueue = kueue_resources(kueue_version)
        self._workloads = kueue["Workload"]
        self._shared = (kueue["Workload"], kueue["AdmissionCheck"], kueue["ResourceFlavor"])
        self._watch = watch or WatchSettings()
        self._notes = notes
        self._backoff = backoff or Backoff(initial_s=0.5, max_s=60.0)
        self._clock = clock
        self._objects: dict[str, dict[Key, dict[str, Any]]] = {}  # kind → key → object
        # kind of an owned object → its Workload's key → its key → the object
        self._owned: dict[str, dict[Key, dict[Key, dict[str, Any]]]] = {}
        self._dirty: dict[Key, None] = {}  # in the order they were marked
        self._wake = asyncio.Event()
        self._failures: dict[Key, int] = {}
        self._ready_rv = 0  # the first lists are complete once the watch is past it
        self.ready = asyncio.Event()
        self.reconciles = 0  # for tests and logs

    def _sources(self) -> list[Source]:
        seen: dict[tuple[str, str], Resource] = {}
        for resource in (
            *self._shared,
            *(c.config for c in self._controllers),
            *(c.owned for c in self._controllers),
        ):
            seen.setdefault((resource.group, resource.plural), resource)
        return [Source(resource=r) for r in seen.values()]

    async def run(self) -> None:
        if not self._controllers:
            return
        self._ready_rv = await current_resource_version(self._transport)
        changes = merged_watch(
            self._transport, self._sources(), settings=self._watch, on_progress=self._progress
        )
        worker = supervised(self._work(), name="check-controllers")
        try:
            async with contextlib.aclosing(changes):
                async for change in changes:
                    self._seen(change)
                    if worker.done():
                        worker.result()  # a bug: raise it
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    def _progress(self, revision: int) -> None:
        if not self.ready.is_set() and revision >> SEQ_BITS >= self._ready_rv:
            self.ready.set()
            self._wake.set()

    # --- the cache ------------------------------------------------------------------------

    def _seen(self, change: ClusterChange) -> None:
        objects = self._objects.setdefault(change.kind, {})
        key = _key(change.obj)
        if change.type == "DELETED":
            objects.pop(key, None)
        else:
            objects[key] = change.obj
        if change.kind == "Workload":
            self._mark([key])
        elif any(change.kind == c.owned.kind for c in self._controllers):
            owner = _controlling_workload(change.obj)
            if owner is not None:
                owned = self._owned.setdefault(change.kind, {}).setdefault(owner, {})
                if change.type == "DELETED":
                    owned.pop(key, None)
                else:
                    owned[key] = change.obj
                self._mark([owner])
        else:  # an AdmissionCheck, a configuration object or a flavor: every user of a check
            self._mark(k for k, wl in self._kind("Workload").items() if self._checks_of(wl))

    def _kind(self, kind: str) -> dict[Key, dict[str, Any]]:
        return self._objects.get(kind, {})

    def _checks_of(self, workload: Mapping[str, Any]) -> bool:
        checks = {name: obj for (_, name), obj in self._kind("AdmissionCheck").items()}
        return any(checks_for(c, workload, checks) for c in self._controllers)

    def _mark(self, keys: Iterable[Key]) -> None:
        self._dirty.update(dict.fromkeys(keys))
        self._wake.set()

    def _later(self, key: Key, delay_s: float) -> None:
        asyncio.get_running_loop().call_later(delay_s, self._mark, [key])

    def inputs(self, controller: CheckController, key: Key) -> Inputs | None:
        """What `controller` reads for workload `key` now (None: no such workload)."""
        workload = self._kind("Workload").get(key)
        if workload is None:
            return None
        checks = {name: obj for (_, name), obj in self._kind("AdmissionCheck").items()}
        configs = {name: obj for (_, name), obj in self._kind(controller.config.kind).items()}
        mine: dict[str, Mapping[str, Any] | None] = {}
        for check in checks_for(controller, workload, checks):
            name = config_of(controller, checks[check])
            mine[check] = configs.get(name) if name is not None else None
        owned = list(self._owned.get(controller.owned.kind, {}).get(key, {}).values())
        flavors = {name: obj for (_, name), obj in self._kind("ResourceFlavor").items()}
        return Inputs(
            workload=workload, checks=mine, owned=owned, flavors=flavors, now_s=self._clock()
        )

    # --- the worker -----------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self.ready.is_set():
                continue
            while self._dirty:
                key = next(iter(self._dirty))
                del self._dirty[key]
                await self._reconcile(key)

    async def _reconcile(self, key: Key) -> None:
        for controller in self._controllers:
            inputs = self.inputs(controller, key)
            if inputs is None or (not inputs.checks and not inputs.owned):
                continue
            plan = controller.reconcile(inputs)
            self.reconciles += 1
            try:
                await self._apply(inputs.workload, plan)
            except ConflictError:
                self._later(key, 0.2)  # the watch shows the newer Workload meanwhile
            except ClusterError as err:
                # Tried again with back-off whatever the error: a refusal (RBAC, a webhook)
                # may be lifted by an operator, as a controller-runtime controller assumes.
                failures = self._failures[key] = self._failures.get(key, 0) + 1
                delay_s = self._backoff.wait_s(self._backoff.delay_s(failures), err)
                level = logging.WARNING if err.temporary else logging.ERROR
                log.log(level, "%s: %s; again in %.1fs", controller.controller_name, err, delay_s)
                if not err.temporary and self._notes is not None:
                    self._notes.record(
                        inputs.workload,
                        type_="Warning",
                        reason="FailedCreate" if plan.create else "ReconcileFailed",
                        note=str(err)[:1000],
                        action="Reconcile",
                    )
                self._later(key, delay_s)
                continue
            self._failures.pop(key, None)
            if plan.recheck_after_s is not None:
                self._later(key, plan.recheck_after_s)

    async def _apply(self, workload: Mapping[str, Any], plan: Plan) -> None:
        namespace = _key(workload)[0]
        for resource, name in plan.delete:
            who = resource.describe(name, namespace)
            answer = await self._transport.request(
                "DELETE",
                resource.object_path(name, namespace),
                obj=who,
                body={"propagationPolicy": "Background"},
            )
            if not answer.ok and answer.status != 404:
                raise answer.error(who)
        # After the deletions: a request made anew may take the name of one made with an
        # older configuration.
        for creation in plan.create:
            await self._create(creation.resource, creation.manifest, creation.adopts, namespace)
        if plan.answers:
            await self._answer(workload, plan)
        if self._notes is not None:
            for note in plan.notes:
                self._notes.record(
                    workload,
                    type_=note.type,
                    reason=note.reason,
                    note=note.note,
                    action="Reconcile",
                )

    async def _create(
        self,
        resource: Resource,
        manifest: Mapping[str, Any],
        adopts: Iterable[tuple[Resource, str]],
        namespace: str,
    ) -> None:
        name = str(manifest["metadata"]["name"])
        who = resource.describe(name, namespace)
        answer = await self._transport.request(
            "POST", resource.collection_path(namespace), obj=who, body=dict(manifest)
        )
        if answer.ok:
            created = answer.json()
        elif answer.status == 409 and b'"AlreadyExists"' in answer.body:
            created = await self._transport.checked(
                "GET", resource.object_path(name, namespace), obj=who
            )
        else:
            raise answer.error(who)
        owner = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "name": name,
            "uid": (created.get("metadata") or {}).get("uid"),
            "controller": True,
            "blockOwnerDeletion": True,
        }
        for adopted, adopted_name in adopts:
            with contextlib.suppress(NotFoundError):
                await self._transport.checked(
                    "PATCH",
                    adopted.object_path(adopted_name, namespace),
                    obj=adopted.describe(adopted_name, namespace),
                    body={"metadata": {"ownerReferences": [owner]}},
                    content_type=MERGE_PATCH,
                )

    async def _answer(self, workload: Mapping[str, Any], plan: Plan) -> None:
        """Write the checks' answers into the Workload they were made from (409 otherwise)."""
        meta = workload.get("metadata") or {}
        now = check_states.format_time(self._clock())
        entries = check_states.entries_of(workload.get("status"))
        for check, answer in sorted(plan.answers.items()):
            entries = check_states.set_state(
                entries, check, answer.state, now=now, message=answer.message, **answer.fields
            )
        namespace, name = _key(workload)
        body = {
            "metadata": {"resourceVersion": meta.get("resourceVersion", "")},
            "status": {"admissionChecks": entries},
        }
        await self._transport.checked(
            "PATCH",
            self._workloads.object_path(name, namespace, "status"),
            obj=self._workloads.describe(name, namespace),
            body=body,
            content_type=MERGE_PATCH,
        )
