"""What the stand-in's controllers share (`jobcontroller`, `jobsetcontroller`): subscribed to
the objects they own and to those those own, one deferred reconcile per owned object and burst
of changes, as a controller's work queue would have it."""

from __future__ import annotations

from typing import Any

from muster.devtools.apiserver.deletion import Api
from muster.devtools.apiserver.objects import meta
from muster.devtools.apiserver.resources import Registry, ResourceType
from muster.devtools.apiserver.store import Change


class Reconciler:
    """Reconciles objects of `owned` (group, plural) of kind `kind`, again whenever one of
    them changes or an object of `dependents` it controls does (ownerReferences)."""

    owned: tuple[str, str]
    kind: str
    dependents: tuple[str, str]

    def __init__(self, api: Api, registry: Registry) -> None:
        self.api = api
        self.registry = registry
        self._pending: set[tuple[str, str]] = set()

    def start(self) -> None:
        for key in (self.owned, self.dependents):
            rt = self.registry.by_key(key)
            if rt is not None:
                self.api.store.subscribe(rt, self)

    # --- ChangeSink ---------------------------------------------------------------------------

    def offer(self, change: Change) -> None:
        obj = change.obj
        namespace = str(meta(obj).get("namespace", ""))
        if change.rt.key == self.owned:
            self._enqueue(namespace, str(meta(obj).get("name", "")))
            return
        for ref in meta(obj).get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("kind") == self.kind and ref.get("controller"):
                self._enqueue(namespace, str(ref.get("name", "")))

    def end(self) -> None:
        """What it reconciles is served for the whole run: never unregistered."""

    def _enqueue(self, namespace: str, name: str) -> None:
        if (namespace, name) not in self._pending:
            self._pending.add((namespace, name))
            self.api.defer(lambda: self._run(namespace, name))

    def _run(self, namespace: str, name: str) -> None:
        self._pending.discard((namespace, name))
        self.reconcile(namespace, name)

    def reconcile(self, namespace: str, name: str) -> None:
        raise NotImplementedError

    def _rt(self, key: tuple[str, str]) -> ResourceType:
        rt = self.registry.by_key(key)
        assert rt is not None
        return rt


def controller_reference(owner: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """The ownerReference a controller sets on what it makes for `owner`: garbage collected
    with it, and deleted before it in a foreground deletion."""
    md = meta(owner)
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": md["name"],
        "uid": md["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
