"""The object a Kubernetes Event is about (an ObjectReference), without the client library:
the watcher builds them on the simulated cluster's code path too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec


class Reference(msgspec.Struct, frozen=True, kw_only=True):
    """The object an Event is about (`regarding`)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    def as_json(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace}
        out["name"] = self.name
        if self.uid:
            out["uid"] = self.uid
        return out


def reference_of(obj: Mapping[str, Any]) -> Reference:
    """The Reference of a stored object (apiVersion, kind, metadata)."""
    meta = obj.get("metadata") or {}
    return Reference(
        api_version=str(obj.get("apiVersion", "")),
        kind=str(obj.get("kind", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
    )
