"""`Resource`: one kind of API object as the Kubernetes API serves it (group, version, plural,
kind) and its REST paths. Neutral ground: the kube backend reads and writes through it, and
the admission check controllers (`muster.checks`) name what they own with it, so that
`muster simulate` can run those controllers without the kube backend.
"""

from __future__ import annotations

from urllib.parse import quote

import msgspec


class Resource(msgspec.Struct, frozen=True, kw_only=True):
    """One served resource (group, version, plural), as its REST paths name it.

    `change_kind` is `ClusterChange.kind` for its objects: the kind, or "<kind>.<group>" for a
    kind whose plain name another group owns (the Workload API's Workload).
    `optional`: a CustomResourceDefinition that may not be installed (404 is not an error).
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    change_kind: str = ""
    optional: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key_kind(self) -> str:
        return self.change_kind or self.kind

    def collection_path(self, namespace: str = "") -> str:
        """The collection: every namespace when `namespace` is "" (or the kind has none)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{root}/namespaces/{quote(namespace, safe='')}/{self.plural}"
        return f"{root}/{self.plural}"

    def object_path(self, name: str, namespace: str = "", subresource: str = "") -> str:
        path = f"{self.collection_path(namespace)}/{quote(name, safe='')}"
        return f"{path}/{subresource}" if subresource else path

    def describe(self, name: str, namespace: str = "") -> str:
        """ "Kind/namespace/name" or "Kind/name", as ClusterError.obj spells objects."""
        return f"{self.kind}/{namespace}/{name}" if self.namespaced else f"{self.kind}/{name}"
