"""Deletion as the real control plane does it, in `Api` (the verbs plus delete): finalizers,
preconditions, propagation (Orphan, Background, Foreground) with a small garbage collector,
namespace termination, and CRD removal.

What runs in controllers on a real cluster (garbage collector, namespace controller) runs here
deferred, right after the request that caused it, so clients see the same event order.
Differs from a real cluster: pods are removed at once (there is no kubelet to confirm a
graceful termination), and `gracePeriodSeconds` is accepted but not waited for.
"""

from __future__ import annotations

from typing import Any

import msgspec

from muster.devtools.apiserver.errors import bad_request, invalid, precondition_failed, unsupported
from muster.devtools.apiserver.objects import JsonObj, deep_copy, meta, timestamp
from muster.devtools.apiserver.resources import ResourceType, stamp_version
from muster.devtools.apiserver.verbs import CRDS, NAMESPACES, ListQuery, Verbs

POLICIES = ("Orphan", "Background", "Foreground")
FOREGROUND = "foregroundDeletion"


class DeleteOptions(msgspec.Struct, frozen=True, kw_only=True):
    propagation_policy: str | None = None
    precondition_uid: str | None = None
    precondition_rv: str | None = None
    dry_run: bool = False


def delete_options(body: Any, query: dict[str, str]) -> DeleteOptions:
    """DeleteOptions from the request body (if any) and the query string."""
    if body is not None and not isinstance(body, dict):
        raise bad_request("the body of a delete must be DeleteOptions")
    body = body or {}
    preconditions = body.get("preconditions") or {}
    policy = body.get("propagationPolicy") or query.get("propagationPolicy")
    if policy is None and (body.get("orphanDependents") is not None or "orphanDependents" in query):
        orphan = body.get("orphanDependents", query.get("orphanDependents") == "true")
        policy = "Orphan" if orphan else "Background"
    dry_run = body.get("dryRun") or ([query["dryRun"]] if "dryRun" in query else [])
    return DeleteOptions(
        propagation_policy=policy,
        precondition_uid=preconditions.get("uid"),
        precondition_rv=preconditions.get("resourceVersion"),
        dry_run="All" in dry_run,
    )


def default_policy(rt: ResourceType) -> str:
    # batch/v1 Jobs orphan their pods unless told otherwise, for backwards compatibility.
    return "Orphan" if rt.key == ("batch", "jobs") else "Background"


class Api(Verbs):
    """All verbs, deletion included."""

    def delete(
        self, rt: ResourceType, version: str, namespace: str, name: str, options: DeleteOptions
    ) -> tuple[int, JsonObj]:
        """(HTTP code, object): 200 with the deleted object, 202 when deletion is pending."""
        old = self.get(rt, namespace, name)
        md = meta(old)
        if options.precondition_uid and options.precondition_uid != md.get("uid"):
            raise precondition_failed(
                rt.group,
                rt.plural,
                name,
                field="UID",
                wanted=options.precondition_uid,
                actual=md.get("uid"),
            )
        if options.precondition_rv and options.precondition_rv != md.get("resourceVersion"):
            raise precondition_failed(
                rt.group,
                rt.plural,
                name,
                field="ResourceVersion",
                wanted=options.precondition_rv,
                actual=md.get("resourceVersion"),
            )
        policy = options.propagation_policy or default_policy(rt)
        if policy not in POLICIES:
            raise invalid(
                "", "DeleteOptions", "", [unsupported("propagationPolicy", policy, list(POLICIES))]
            )
        if options.dry_run:
            return 200, stamp_version(old, rt, version)
        if md.get("deletionTimestamp"):
            return 202, stamp_version(old, rt, version)
        if rt.key == NAMESPACES:
            return 200, stamp_version(self._terminate_namespace(rt, old), rt, version)
        if policy == "Orphan":
            self._orphan_dependents(str(md.get("uid")))
        finalizers = list(md.get("finalizers") or [])
        if policy == "Foreground" and self.store.dependents(str(md.get("uid"))):
            finalizers.append(FOREGROUND)
        if finalizers:
            pending = self._mark_deleting(rt, old, finalizers)
            if FOREGROUND in finalizers:
                self.defer(lambda: self._finish_foreground(rt, namespace, name))
            return 202, stamp_version(pending, rt, version)
        self.finish_deletion(rt, old)
        return 200, stamp_version(old, rt, version)

    def delete_collection(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        query: ListQuery,
        options: DeleteOptions,
    ) -> JsonObj:
        listed = self.list_objects(
            rt, version, namespace, ListQuery(labels=query.labels, fields=query.fields)
        )
        deleted = []
        for item in listed["items"]:
            md = meta(item)
            if self.store.get(rt, (md.get("namespace", ""), md["name"])) is not None:
                deleted.append(
                    self.delete(rt, version, md.get("namespace", ""), md["name"], options)[1]
                )
        listed["items"] = deleted
        listed["metadata"] = {"resourceVersion": str(self.store.rv)}
        return listed

    def _mark_deleting(self, rt: ResourceType, old: JsonObj, finalizers: list[str]) -> JsonObj:
        pending = deep_copy(old)
        md = meta(pending)
        md["deletionTimestamp"] = timestamp(self.clock())
        md["deletionGracePeriodSeconds"] = 0
        md["finalizers"] = finalizers
        self.store.put(rt, pending, old)
        return pending

    def finish_deletion(
        self, rt: ResourceType, obj: JsonObj, *, last_state: JsonObj | None = None
    ) -> None:
        if rt.key == CRDS:
            self._remove_crd_instances(obj)
        super().finish_deletion(rt, obj, last_state=last_state)
        uid = str(meta(obj).get("uid"))
        if self.garbage_collection and self.store.dependents(uid):
            self.defer(lambda: self._collect_dependents(uid))
        namespace = meta(obj).get("namespace")
        if namespace:
            self._finish_namespace_if_empty(namespace)

    # --- the garbage collector -------------------------------------------------------------

    def _dependents(self, uid: str) -> list[tuple[ResourceType, JsonObj]]:
        found = []
        for rt_key, key in self.store.dependents(uid):
            rt = self.registry.by_key(rt_key)
            obj = self.store.get(rt, key) if rt else None
            if rt is not None and obj is not None:
                found.append((rt, obj))
        return found

    def _orphan_dependents(self, uid: str) -> None:
        for rt, obj in self._dependents(uid):
            self._drop_owner_refs(rt, obj, {uid})

    def _drop_owner_refs(self, rt: ResourceType, obj: JsonObj, uids: set[str]) -> None:
        updated = deep_copy(obj)
        refs = [r for r in meta(updated).get("ownerReferences") or [] if r.get("uid") not in uids]
        if refs:
            meta(updated)["ownerReferences"] = refs
        else:
            meta(updated).pop("ownerReferences", None)
        self.store.put(rt, updated, obj)

    def _collect_dependents(self, uid: str) -> None:
        """Delete dependents whose owners are all gone; drop the dead reference from others."""
        for rt, obj in self._dependents(uid):
            owners = {r.get("uid") for r in meta(obj).get("ownerReferences") or []}
            dead = {u for u in owners if isinstance(u, str) and not self.store.exists(u)}
            if dead == owners:
                md = meta(obj)
                self.delete(
                    rt,
                    rt.preferred_version,
                    md.get("namespace", ""),
                    md["name"],
                    DeleteOptions(propagation_policy="Background"),
                )
            else:
                self._drop_owner_refs(rt, obj, dead)

    def _finish_foreground(self, rt: ResourceType, namespace: str, name: str) -> None:
        owner = self.store.get(rt, (namespace, name))
        if owner is None:
            return
        self._collect_dependents(str(meta(owner).get("uid")))
        owner = self.store.get(rt, (namespace, name))
        if owner is None:
            return
        rest = [f for f in meta(owner).get("finalizers") or [] if f != FOREGROUND]
        if rest:
            updated = deep_copy(owner)
            meta(updated)["finalizers"] = rest
            self.store.put(rt, updated, owner)
        else:
            final = deep_copy(owner)
            meta(final).pop("finalizers", None)
            self.finish_deletion(rt, owner, last_state=final)

    # --- namespaces and CRDs ---------------------------------------------------------------

    def _terminate_namespace(self, rt: ResourceType, ns: JsonObj) -> JsonObj:
        terminating = deep_copy(ns)
        meta(terminating)["deletionTimestamp"] = timestamp(self.clock())
        meta(terminating)["deletionGracePeriodSeconds"] = 0
        terminating.setdefault("status", {})["phase"] = "Terminating"
        self.store.put(rt, terminating, ns)
        name = str(meta(ns)["name"])
        self.defer(lambda: self._purge_namespace(name))
        return terminating

    def _purge_namespace(self, namespace: str) -> None:
        for rt in self.registry.all():
            if not rt.namespaced:
                continue
            for key in [k for k in self.store.objects(rt) if k[0] == namespace]:
                obj = self.store.get(rt, key)
                if obj is not None and not meta(obj).get("deletionTimestamp"):
                    self.delete(
                        rt,
                        rt.preferred_version,
                        namespace,
                        key[1],
                        DeleteOptions(propagation_policy="Background"),
                    )
        self._finish_namespace_if_empty(namespace)

    def _finish_namespace_if_empty(self, namespace: str) -> None:
        ns_rt = self.registry.by_key(NAMESPACES)
        ns = self.store.get(ns_rt, ("", namespace)) if ns_rt else None
        if ns_rt is None or ns is None or (ns.get("status") or {}).get("phase") != "Terminating":
            return
        for rt in self.registry.all():
            if rt.namespaced and any(k[0] == namespace for k in self.store.objects(rt)):
                return
        Verbs.finish_deletion(self, ns_rt, ns)

    def _remove_crd_instances(self, crd: JsonObj) -> None:
        spec = crd.get("spec") or {}
        rt = self.registry.by_key(
            (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        )
        if rt is None or not rt.custom:
            return
        for obj in list(self.store.objects(rt).values()):
            super().finish_deletion(rt, obj)
        for sink in self.store.sinks(rt):
            sink.end()
        self.registry.remove(rt.key)
