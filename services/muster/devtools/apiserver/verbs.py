"""The API verbs over the store: get, list, create, update (PUT), patch and the status
subresource, with the real server's metadata rules.

- create sets uid, creationTimestamp, resourceVersion and generation; 404 when the namespace
  does not exist, 403 when it is terminating, 409 AlreadyExists, 422 Invalid.
- update/patch: 409 Conflict on a stale resourceVersion; a write that changes nothing commits
  nothing (no new resourceVersion, no watch event); with a status subresource the main resource
  ignores status and `/status` changes only status; generation moves only when something
  outside metadata and status changes.
Deletion, the garbage collector and namespace termination extend `Verbs` in `deletion`;
pods/binding is in `binding`.
"""

from __future__ import annotations

import base64
import binascii
import random
import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from muster.devtools.apiserver import patch as patches
from muster.devtools.apiserver.errors import (
    STALE_OBJECT,
    ApiError,
    Cause,
    already_exists,
    bad_request,
    bad_value,
    conflict,
    expired,
    forbidden,
    forbidden_request,
    invalid,
    not_found,
    precondition_failed,
    too_large_resource_version,
)
from muster.devtools.apiserver.events import core_view
from muster.devtools.apiserver.fields import STRICT, strict_error, unknown_fields
from muster.devtools.apiserver.limits import limit_causes
from muster.devtools.apiserver.objects import (
    JsonObj,
    ObjKey,
    deep_copy,
    encode,
    key_of,
    meta,
    name_of,
    resource_version_of,
    timestamp,
)
from muster.devtools.apiserver.resources import (
    Registry,
    ResourceType,
    crd_schemas,
    from_crd,
    stamp_version,
)
from muster.devtools.apiserver.selectors import FieldSelector, LabelSelector
from muster.devtools.apiserver.store import Store
from muster.devtools.apiserver.strategies import Context, strategy_for
from muster.devtools.apiserver.strategy_base import V1_36, FeatureGates
from muster.devtools.apiserver.validation import metadata_causes

_GENERATED_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_SET = (
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
NAMESPACES = ("", "namespaces")
PRIORITY_CLASSES = ("scheduling.k8s.io", "priorityclasses")
LIMIT_RANGES = ("", "limitranges")
RUNTIME_CLASSES = ("node.k8s.io", "runtimeclasses")
CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")
EVENTS_V1 = ("events.k8s.io", "events")  # also served as core/v1 Events


class ListQuery(msgspec.Struct, frozen=True, kw_only=True):
    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()
    limit: int = 0
    continue_token: str = ""
    resource_version: str | None = None
    resource_version_match: str | None = None


class _ContinueToken(msgspec.Struct, frozen=True):
    rv: int
    namespace: str
    name: str


def strip_nulls(value: Any) -> Any:
    """JSON with null members removed, as decoding into typed objects drops them."""
    if b"null" not in encode(value):  # the common case, checked at C speed
        return value
    return _without_nulls(value)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _spec_part(obj: JsonObj) -> JsonObj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Verbs:
    """Verbs over one store. `defer` runs a callable soon after the current request (the
    namespace controller and the garbage collector work asynchronously, as in a cluster)."""

    def __init__(
        self,
        registry: Registry,
        store: Store,
        *,
        clock: Callable[[], float],
        defer: Callable[[Callable[[], None]], None],
        garbage_collection: bool = True,
        gates: FeatureGates = V1_36,
    ) -> None:
        self.registry = registry
        self.store = store
        self.clock = clock
        self.defer = defer
        self.garbage_collection = garbage_collection
        self.gates = gates

    # --- reads -----------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str) -> JsonObj:
        obj = self.store.get(rt, (namespace, name))
        if obj is None:
            raise not_found(rt.group, rt.plural, name)
        return obj

    def list_objects(
        self, rt: ResourceType, version: str, namespace: str, query: ListQuery
    ) -> JsonObj:
        """A list at one resourceVersion, paged by `limit`/`continue` over (namespace, name)."""
        at_rv, start = self._list_position(query)
        state = self.store.snapshot(rt, at_rv)
        name = query.fields.exact_name()
        if name is not None:
            keys = [
                k
                for k in ([(namespace, name)] if namespace or not rt.namespaced else sorted(state))
                if k in state
            ]
        else:
            keys = sorted(state)
        matched = [
            key
            for key in keys
            if (not namespace or key[0] == namespace)
            and key > start
            and query.labels.matches(state[key])
            and query.fields.matches(state[key])
        ]
        page = matched[: query.limit] if query.limit > 0 else matched
        list_meta: JsonObj = {"resourceVersion": str(at_rv)}
        if len(page) < len(matched):
            token = _ContinueToken(at_rv, *page[-1])
            list_meta["continue"] = base64.urlsafe_b64encode(msgspec.json.encode(token)).decode()
            if not query.labels.requirements and not query.fields.terms:
                list_meta["remainingItemCount"] = len(matched) - len(page)
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version(version),
            "metadata": list_meta,
            "items": [stamp_version(state[k], rt, version) for k in page],
        }

    def _list_position(self, query: ListQuery) -> tuple[int, ObjKey]:
        rv_text, match = query.resource_version, query.resource_version_match
        if match and not rv_text:
            raise bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided"
            )
        if query.continue_token:
            if rv_text:
                raise bad_request("specifying resource version is not allowed when using continue")
            try:
                token = msgspec.json.decode(
                    base64.urlsafe_b64decode(query.continue_token), type=_ContinueToken
                )
            except (binascii.Error, ValueError, msgspec.DecodeError) as err:
                raise bad_request(f"continue key is not valid: {err}") from err
            if token.rv < self.store.compacted_rv:
                raise expired(
                    "the continue token is older than the kept history: list again without it"
                )
            return token.rv, (token.namespace, token.name)
        if not rv_text or rv_text == "0":
            if match == "Exact":
                raise bad_request(
                    'resourceVersionMatch "Exact" is forbidden for resourceVersion "0"'
                )
            return self.store.rv, ("", "")
        asked = _parse_rv(rv_text)
        if asked > self.store.rv:
            raise too_large_resource_version(asked, self.store.rv)
        if match == "Exact":
            return asked, ("", "")
        if match not in (None, "", "NotOlderThan"):
            raise bad_request(f"unsupported resourceVersionMatch {match!r}")
        return self.store.rv, ("", "")

    # --- create ----------------------------------------------------------------------------

    def create(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        body: Any,
        *,
        dry_run: bool = False,
        field_validation: str = "",
    ) -> JsonObj:
        obj = self._decode_body(rt, version, namespace, body)
        self._check_fields(rt, version, obj, field_validation)
        md = meta(obj)
        if not md.get("name") and md.get("generateName"):
            md["name"] = self._generate_name(rt, namespace, str(md["generateName"]))
        if md.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        for field in (*_SERVER_SET, "selfLink", "managedFields"):
            md.pop(field, None)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = timestamp(self.clock())
        if rt.generation:
            md["generation"] = 1
        strategy = strategy_for(rt, self.gates)
        strategy.defaults(obj)
        if rt.namespaced:
            self._check_namespace_open(namespace)
        if rt.custom and rt.status:
            obj.pop("status", None)
        self._validate(rt, obj, strategy.causes(obj) + self._limit_causes(rt, obj))
        if self.store.get(rt, (namespace, name_of(obj))) is not None:
            raise already_exists(rt.group, rt.plural, name_of(obj))
        strategy.prepare_create(obj, self._context())
        if dry_run:
            return obj
        if rt.key == CRDS:
            self._register_crd(obj)
        self.store.put(rt, obj, None)
        self._mirror(rt, obj)
        return obj

    def _mirror(self, rt: ResourceType, obj: JsonObj | None, *, key: ObjKey = ("", "")) -> None:
        """An events.k8s.io Event is a core/v1 Event too (`events.core_view`); None: gone."""
        core = self.registry.by_key(("", "events")) if rt.key == EVENTS_V1 else None
        if core is None:
            return
        key = key_of(obj) if obj is not None else key
        old = self.store.get(core, key)
        if obj is not None:
            self.store.put(core, core_view(obj), old)
        elif old is not None:
            self.store.remove(core, old)

    def _generate_name(self, rt: ResourceType, namespace: str, prefix: str) -> str:
        prefix = prefix[:58]
        for _ in range(8):
            name = prefix + "".join(random.choice(_GENERATED_CHARS) for _ in range(5))
            if self.store.get(rt, (namespace, name)) is None:
                return name
        raise ApiError(500, "ServerTimeout", f"could not generate a unique name from {prefix!r}")

    def _decode_body(self, rt: ResourceType, version: str, namespace: str, body: Any) -> JsonObj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        obj: JsonObj = strip_nulls(body)
        api_version = rt.api_version(version)
        if obj.get("apiVersion", api_version) != api_version or obj.get("kind", rt.kind) != rt.kind:
            raise bad_request(
                f"the object's {obj.get('apiVersion')}/{obj.get('kind')} does not match the "
                f"request's {api_version}/{rt.kind}"
            )
        obj["apiVersion"], obj["kind"] = api_version, rt.kind
        md = meta(obj)
        if rt.namespaced:
            if md.get("namespace") and md["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the object does not match the namespace of the request"
                )
            md["namespace"] = namespace
        else:
            md.pop("namespace", None)
        return obj

    def _check_fields(
        self, rt: ResourceType, version: str, obj: JsonObj, field_validation: str
    ) -> None:
        """`fieldValidation=Strict`: 400 naming every field the kind does not have."""
        if field_validation != STRICT:
            return
        unknown = unknown_fields(obj, self.registry.schema(rt, version))
        if unknown:
            raise strict_error(rt.kind, version, unknown)

    def _limit_causes(self, rt: ResourceType, obj: JsonObj) -> list[Cause]:
        """The fields of `obj` past its CRD schema's size limits (`limits`)."""
        version = str(obj.get("apiVersion", "")).rpartition("/")[2]
        return limit_causes(obj, self.registry.schema(rt, version))

    def _check_namespace_open(self, namespace: str) -> None:
        ns_rt = self.registry.by_key(NAMESPACES)
        ns = self.store.get(ns_rt, ("", namespace)) if ns_rt else None
        if ns is None:
            raise not_found("", "namespaces", namespace)
        if (ns.get("status") or {}).get("phase") == "Terminating":
            raise forbidden_request(
                f"namespace {namespace} is terminating: new objects cannot be created in it",
                details={
                    "name": namespace,
                    "kind": "namespaces",
                    "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}],
                },
            )

    def _validate(self, rt: ResourceType, obj: JsonObj, extra: list[Cause]) -> None:
        strategy = strategy_for(rt, self.gates)
        causes = (
            metadata_causes(obj, name_check=strategy.name_check, namespaced=rt.namespaced) + extra
        )
        if causes:
            raise invalid(rt.group, rt.kind, name_of(obj), causes)

    def _context(self) -> Context:
        pcs = self.registry.by_key(PRIORITY_CLASSES)

        def priority_class(name: str) -> JsonObj | None:
            return self.store.get(pcs, ("", name)) if pcs else None

        def global_default() -> JsonObj | None:
            found = [
                pc
                for pc in (self.store.objects(pcs).values() if pcs else ())
                if pc.get("globalDefault")
            ]
            return min(found, key=lambda pc: int(pc.get("value", 0))) if found else None

        def limit_ranges(namespace: str) -> list[JsonObj]:
            rt = self.registry.by_key(LIMIT_RANGES)
            found = self.store.objects(rt).values() if rt else ()
            return [lr for lr in found if meta(lr).get("namespace") == namespace]

        def runtime_class(name: str) -> JsonObj | None:
            rt = self.registry.by_key(RUNTIME_CLASSES)
            return self.store.get(rt, ("", name)) if rt else None

        return Context(
            priority_class=priority_class,
            global_default_priority_class=global_default,
            now=timestamp(self.clock()),
            limit_ranges=limit_ranges,
            runtime_class=runtime_class,
        )

    def _register_crd(self, crd: JsonObj) -> None:
        rt, _ = from_crd(crd)
        if rt is not None:
            self.registry.add(rt, schemas=crd_schemas(crd))

    # --- update and patch ------------------------------------------------------------------

    def update(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        field_validation: str = "",
    ) -> JsonObj:
        old = self.get(rt, namespace, name)
        obj = self._decode_body(rt, version, namespace, body)
        if not subresource:
            self._check_fields(rt, version, obj, field_validation)
        if not meta(obj).get("resourceVersion"):
            if rt.custom:
                raise invalid(
                    rt.group,
                    rt.kind,
                    name,
                    [bad_value("metadata.resourceVersion", 0, "must be specified for an update")],
                )
            meta(obj)["resourceVersion"] = meta(old)["resourceVersion"]
        return self._write(rt, name, obj, old, subresource=subresource, dry_run=dry_run)

    def patch(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        field_validation: str = "",
    ) -> JsonObj:
        old = self.get(rt, namespace, name)
        target = deep_copy(stamp_version(old, rt, version))
        patched = patches.apply_patch(target, content_type, body, custom=rt.custom)
        if not isinstance(patched, dict):
            raise invalid(
                rt.group, rt.kind, name, [bad_value("", "", "the patched object is not an object")]
            )
        obj = self._decode_body(rt, version, namespace, patched)
        if not subresource:
            self._check_fields(rt, version, obj, field_validation)
        return self._write(rt, name, obj, old, subresource=subresource, dry_run=dry_run)

    def _write(
        self,
        rt: ResourceType,
        name: str,
        obj: JsonObj,
        old: JsonObj,
        *,
        subresource: str,
        dry_run: bool,
    ) -> JsonObj:
        """Commit `obj` over `old`: preconditions, server-owned metadata, validation, no-op skip."""
        md, old_md = meta(obj), meta(old)
        if name_of(obj) != name:
            raise bad_request(f"the object's name ({name_of(obj)}) differs from the URL's ({name})")
        if resource_version_of(obj) != resource_version_of(old):
            raise conflict(rt.group, rt.plural, name, STALE_OBJECT)
        if md.get("uid") and md["uid"] != old_md.get("uid"):
            raise precondition_failed(
                rt.group, rt.plural, name, field="UID", wanted=md["uid"], actual=old_md.get("uid")
            )
        if subresource == "status":
            status = obj.get("status")
            obj = {k: v for k, v in old.items() if k != "status"}
            obj["metadata"] = dict(old_md)
            if status is not None:
                obj["status"] = status
            md = obj["metadata"]
            status_causes = strategy_for(rt, self.gates).status_causes(obj, old)
            if status_causes:
                self._validate(rt, obj, status_causes)
        else:
            for field in _SERVER_SET:
                if field in old_md:
                    md[field] = old_md[field]
                else:
                    md.pop(field, None)
            if rt.status:
                obj.pop("status", None)
                if "status" in old:
                    obj["status"] = old["status"]
            strategy = strategy_for(rt, self.gates)
            strategy.defaults(obj)
            causes = (
                strategy.causes(obj)
                + strategy.update_causes(obj, old)
                + self._finalizer_causes(obj, old)
                + self._limit_causes(rt, obj)
            )
            self._validate(rt, obj, causes)
            if rt.generation and _spec_part(obj) != _spec_part(old):
                md["generation"] = int(old_md.get("generation", 0)) + 1
        md["resourceVersion"] = old_md["resourceVersion"]
        if obj == old:
            return old  # nothing changed: no new resourceVersion, no event
        if dry_run:
            return obj
        if rt.key == CRDS:
            self._register_crd(obj)
        if md.get("deletionTimestamp") and not md.get("finalizers"):
            # The last finalizer went: the write deletes the object (one DELETED event).
            self.finish_deletion(rt, old, last_state=obj)
            return obj
        self.store.put(rt, obj, old)
        self._mirror(rt, obj)
        return obj

    def _finalizer_causes(self, obj: JsonObj, old: JsonObj) -> list[Cause]:
        if not meta(old).get("deletionTimestamp"):
            return []
        before = set(meta(old).get("finalizers") or [])
        added = [f for f in meta(obj).get("finalizers") or [] if f not in before]
        return (
            [
                forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added while the object is being deleted",
                )
            ]
            if added
            else []
        )

    def finish_deletion(
        self, rt: ResourceType, obj: JsonObj, *, last_state: JsonObj | None = None
    ) -> None:
        """Remove a stored object nothing holds up any more; `deletion.Api` adds what follows
        (dependents, CRD instances)."""
        self.store.remove(rt, obj, last_state=last_state)
        self._mirror(rt, None, key=key_of(obj))


def _parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise bad_request(f"invalid resource version: {text!r}")
    return value
