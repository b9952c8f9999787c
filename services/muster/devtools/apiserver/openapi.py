"""The OpenAPI documents kubectl reads before it writes, built from the served resources.

kubectl (1.27 and later) validates what it applies or creates on the server when the kind's
PATCH in /openapi/v3 takes the `fieldValidation` query parameter; the stand-in checks fields
strictly itself (`fields`), so each kind's write operations say so, and kubectl needs no
`--validate=false`. It checks a Namespace client-side instead, against /openapi/v2, which it
asks for in protobuf: the stand-in serves that document empty (an empty protobuf message, no
definitions), so the check finds no schema and passes, as it would for an unknown kind. Each
/openapi/v3 group version also carries, under components, the structural schema field
validation uses for its kinds (Jobs, Pods and CRDs'; `Registry.schema`).
"""

from __future__ import annotations

import hashlib
from typing import Final

import msgspec

from muster.devtools.apiserver.objects import JsonObj
from muster.devtools.apiserver.resources import Registry, ResourceType

OPENAPI_V2_PROTOBUF: Final = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
_WRITES: Final = ("dryRun", "fieldManager", "fieldValidation")


def _query(*names: str) -> list[JsonObj]:
    return [
        {"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}} for n in names
    ]


def _prefix(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def v3_root(registry: Registry) -> JsonObj:
    """/openapi/v3: each served group version and where its document is (with its hash, as a
    real server names it, so a client's cache keeps it until it changes)."""
    paths: JsonObj = {}
    for group, versions in registry.group_versions().items():
        for version in versions:
            doc = v3_group_version(registry, group, version)
            if doc is None:
                continue
            digest = hashlib.sha512(msgspec.json.encode(doc)).hexdigest().upper()
            prefix = _prefix(group, version)
            paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={digest}"}
    return {"paths": paths}


def v3_group_version(registry: Registry, group: str, version: str) -> JsonObj | None:
    """/openapi/v3/api/v1 or /openapi/v3/apis/<group>/<version>; None when not served."""
    served = sorted(
        (rt for rt in registry.all() if rt.group == group and version in rt.versions),
        key=lambda rt: rt.plural,
    )
    if not served:
        return None
    paths: JsonObj = {}
    schemas: JsonObj = {}
    for rt in served:
        paths.update(_paths(rt, group, version))
        schema = registry.schema(rt, version)
        if schema is not None:
            schemas[_schema_name(rt, version)] = {
                **schema,
                "x-kubernetes-group-version-kind": [_gvk(rt, version)],
            }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0-muster-standin"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _gvk(rt: ResourceType, version: str) -> JsonObj:
    return {"group": rt.group, "version": version, "kind": rt.kind}


def _schema_name(rt: ResourceType, version: str) -> str:
    group = rt.group or "core"
    return f"{'.'.join(reversed(group.split('.')))}.{version}.{rt.kind}"


def _paths(rt: ResourceType, group: str, version: str) -> JsonObj:
    """The collection's, the object's and its subresources' paths, each operation naming its
    kind and action, writes taking dryRun, fieldManager and fieldValidation."""
    base = "/" + _prefix(group, version)
    scope = (
        f"{base}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{base}/{rt.plural}"
    )
    gvk = _gvk(rt, version)

    def op(action: str, *params: str) -> JsonObj:
        return {
            "operationId": f"{action}{rt.kind}",
            "parameters": _query(*params),
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        }

    paths: JsonObj = {
        scope: {
            "get": op("list", "labelSelector", "fieldSelector", "limit", "continue", "watch"),
            "post": op("post", *_WRITES),
            "delete": op("deletecollection", "labelSelector", "fieldSelector"),
        },
        f"{scope}/{{name}}": {
            "get": op("get"),
            "put": op("put", *_WRITES),
            "patch": op("patch", *_WRITES, "force"),
            "delete": op("delete", "dryRun", "gracePeriodSeconds", "propagationPolicy"),
        },
    }
    if rt.status:
        paths[f"{scope}/{{name}}/status"] = {
            "get": op("get"),
            "put": op("put", *_WRITES),
            "patch": op("patch", *_WRITES, "force"),
        }
    return paths
