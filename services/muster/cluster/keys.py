"""Object keys of the cluster seam: how a `ClusterChange` names its object, whichever backend
made it, and the keys of the simulated cluster's objects in KV bucket `MUSTER_SIM_<cluster>`
(the Kubernetes backend names its changes the same way, so consumers see one format).

    node.<name>                      v1 Node
    pod.<namespace>.<name>           v1 Pod
    obj.<kind>.<namespace>.<name>    anything else applied (Kueue objects, Jobs, Workloads);
                                     <namespace> is "_" for a cluster-scoped kind

A scheduling.k8s.io Workload (the Kubernetes Workload API) is stored as kind
`Workload.scheduling.k8s.io`, apart from Kueue's Workload of the same name and namespace, and a
scheduling.k8s.io PodGroup as `PodGroup.scheduling.k8s.io`, apart from scheduler-plugins'.

Each segment is escaped so that any name makes a valid KV key and the mapping is one-to-one:
ASCII letters, digits and "-" stay as they are; every other character becomes "=" followed by
its UTF-8 bytes in upper-case hex ("." -> "=2E", "_" -> "=5F", "=" -> "=3D", "é" -> "=C3=A9").
An empty segment (a nameless Configuration) is written "_", which no escaped value can equal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from muster.cluster.errors import InvalidObjectError

BUCKET_PREFIX = "MUSTER_SIM_"
NODE_PREFIX = "node."
POD_PREFIX = "pod."
OBJECT_PREFIX = "obj."
NO_NAMESPACE = "_"
DEFAULT_NAMESPACE = "default"

# Kinds without a namespace (Kubernetes core and Kueue); every other kind is namespaced.
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "AdmissionCheck",
        "ClusterQueue",
        "Cohort",
        "Configuration",
        "MultiKueueCluster",
        "MultiKueueConfig",
        "Namespace",
        "Node",
        "PriorityClass",
        "ProvisioningRequestConfig",
        "ResourceFlavor",
        "RuntimeClass",
        "Topology",
        "WorkloadPriorityClass",
    }
)

# Kinds that another API group also uses: stored as "<kind>.<group>" outside the group that
# owns the plain name (Kueue's Workload keeps "Workload").
_SHARED_KINDS = {"Workload": "kueue.x-k8s.io", "PodGroup": "scheduling.x-k8s.io"}
SCHEDULING_WORKLOAD_KIND = "Workload.scheduling.k8s.io"
SCHEDULING_POD_GROUP_KIND = "PodGroup.scheduling.k8s.io"  # scheduler-plugins' keeps "PodGroup"

_PLAIN = re.compile(r"[A-Za-z0-9-]+")
_NOT_PLAIN = re.compile(r"[^A-Za-z0-9-]")
_ESCAPED = re.compile(r"(?:=[0-9A-F]{2})+")
_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-]+")


def bucket_name(cluster: str) -> str:
    """Return the KV bucket of cluster `cluster`: "MUSTER_SIM_local"."""
    if not _CLUSTER_ID.fullmatch(cluster):
        raise ValueError(f"cluster id must match [A-Za-z0-9_-]+, got {cluster!r}")
    return BUCKET_PREFIX + cluster


def escape(segment: str) -> str:
    """Return `segment` as one key token (see the module docstring); "" becomes "_"."""
    if not segment:
        return NO_NAMESPACE
    if _PLAIN.fullmatch(segment):  # most names: nothing to escape
        return segment
    return _NOT_PLAIN.sub(lambda m: _hex(m[0]), segment)


def unescape(token: str) -> str:
    """Return the segment `escape` turned into `token`."""
    if token == NO_NAMESPACE:
        return ""
    return _ESCAPED.sub(lambda m: bytes.fromhex(m[0].replace("=", "")).decode(), token)


def _hex(char: str) -> str:
    return "".join(f"={b:02X}" for b in char.encode())


def kind_prefix(kind: str) -> str:
    """The keys of every object of `kind` other than nodes and pods: "obj.PriorityClass."."""
    return f"{OBJECT_PREFIX}{escape(kind)}."


# The keys of what gang placement reads (`Selection` "placement", as the Kubernetes backend
# selects it: nodes, pods, gangs, priorities). The simulated cluster's placement watch reads
# these only, so the rest (Jobs, Kueue Workloads and their statuses, Events) is not delivered.
PLACEMENT_PREFIXES = (
    NODE_PREFIX,
    POD_PREFIX,
    *map(
        kind_prefix,
        (
            SCHEDULING_WORKLOAD_KIND,
            SCHEDULING_POD_GROUP_KIND,
            "CompositePodGroup",
            "PodGroup",
            "PriorityClass",
        ),
    ),
)


def node_key(name: str) -> str:
    return NODE_PREFIX + escape(name)


def pod_key(namespace: str, name: str) -> str:
    return f"{POD_PREFIX}{escape(namespace)}.{escape(name)}"


def namespace_prefix(namespace: str) -> str:
    """Return the prefix shared by every pod key in `namespace`."""
    return f"{POD_PREFIX}{escape(namespace)}."


def object_key(kind: str, namespace: str, name: str) -> str:
    """Return the key of any object; Node and Pod get their own prefixes."""
    if kind == "Node":
        return node_key(name)
    if kind == "Pod":
        return pod_key(namespace, name)
    return f"{OBJECT_PREFIX}{escape(kind)}.{escape(namespace)}.{escape(name)}"


def identity(manifest: Mapping[str, Any]) -> tuple[str, str, str]:
    """Return (kind, namespace, name) of a manifest, with the namespace Kubernetes would use.

    Cluster-scoped kinds get "" (whatever is written); namespaced ones "default" when none is
    written. Raises InvalidObjectError without a kind, or without a name for a kind that needs one.
    """
    kind = manifest.get("kind")
    meta = manifest.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    namespace = meta.get("namespace")
    who = f"{kind}/{name}"
    if not isinstance(kind, str) or not kind:
        raise InvalidObjectError(who, ["kind: is required"])
    if not isinstance(name, str) or (not name and kind != "Configuration"):
        raise InvalidObjectError(who, ["metadata.name: is required"])
    kind = _stored_kind(kind, manifest.get("apiVersion"))
    if kind in CLUSTER_SCOPED_KINDS:
        return kind, "", name
    if not isinstance(namespace, str) or not namespace:
        namespace = DEFAULT_NAMESPACE
    return kind, namespace, name


def _stored_kind(kind: str, api_version: object) -> str:
    """Return `kind`, or "<kind>.<group>" for a kind whose plain name another group owns."""
    owner = _SHARED_KINDS.get(kind)
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
    if owner is None or not group or group == owner:
        return kind
    return f"{kind}.{group}"


def kind_of(key: str) -> str:
    """Return the kind a key names: "Node", "Pod", or the kind of an `obj.` key."""
    if key.startswith(NODE_PREFIX):
        return "Node"
    if key.startswith(POD_PREFIX):
        return "Pod"
    return unescape(key.removeprefix(OBJECT_PREFIX).split(".", 1)[0])


def describe(key: str) -> str:
    """Return "Kind/name" or "Kind/namespace/name" for messages (a foreign key as it is)."""
    tokens = [unescape(t) for t in key.split(".")]
    if key.startswith(NODE_PREFIX) and len(tokens) == 2:
        return f"Node/{tokens[1]}"
    if key.startswith(POD_PREFIX) and len(tokens) == 3:
        return f"Pod/{tokens[1]}/{tokens[2]}"
    if key.startswith(OBJECT_PREFIX) and len(tokens) == 4:
        kind, namespace, name = tokens[1:]
        return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
    return key
