"""What one workload of `bench e2e`'s one-per-Submit burst stores, for `bench floor` to store.

The messages and their sizes are muster's (measured on `bench e2e --shards 1`, burst of one
workload per Submit, main 2dcad96): per workload nine stored, each with its PubAck,

| writer | message | data bytes | headers |
|---|---|---:|---|
| gateway | the name's claim in MUSTER_NAMES (a create: fenced on revision 0) | 86 | fence |
| gateway | `submitted` (the Workload as JSON) | 631 | id, traceparent |
| admission | `admitted` (fenced on the partition's record) | 730 | id, traceparent, fence |
| binder | the pod created, then bound, in the simulated cluster's bucket | 880, 920 | - |
| binder | `bound` | 278 | id, traceparent |
| gang-permit | `gang_permitted` | 291 | id, traceparent |
| sim-cluster | the pod Running | 950 | - |
| watcher | `running` | 203 | id, traceparent |

The events are real `Envelope`s on muster's own subjects; those whose payload is a decision
(admitted, gang_permitted, bound, running) carry the payload's message empty and are padded
to muster's size in `source`, since what the floor measures is bytes moved and decoded, not
what they say. The pods are Pod-shaped JSON padded in an annotation.
"""

from __future__ import annotations

import hashlib
import time
from typing import Final

import msgspec

from muster.bus.envelope import caused_event_id, encode
from muster.bus.publisher import (
    EXPECTED_LAST_SUBJECT_SEQUENCE,
    EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT,
    MSG_ID,
)
from muster.bus.subjects import subject_of
from muster.contracts.v1.events_pb2 import Envelope

CLUSTER: Final = "local"
NAMESPACE: Final = "bench"
PARTITIONS: Final = 16
EVENT_BYTES: Final = {"admitted": 730, "gang_permitted": 291, "bound": 278, "running": 203}
POD_BYTES: Final = {"created": 880, "bound": 920, "running": 950}
CLAIM_BYTES: Final = 86
NODE: Final = "node-000"
_TRACEPARENT: Final = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
_ENCODE = msgspec.json.Encoder()


def workload_of(manifest: str) -> str:
    """The floor gateway's workload key for a manifest: a hash, since parsing it is muster's."""
    return f"{NAMESPACE}/w-{hashlib.blake2b(manifest.encode(), digest_size=8).hexdigest()}"


def partition_of(workload: str) -> str:
    return str(int(hashlib.blake2b(workload.encode(), digest_size=2).hexdigest(), 16) % PARTITIONS)


def event(event_type: str, workload: str, *, cause: str = "", manifest_json: str = "") -> Envelope:
    """An envelope of `workload.<event_type>` about `workload`, of muster's size."""
    env = Envelope(
        type=f"workload.{event_type}",
        time_unix_nano=time.time_ns(),
        cluster=CLUSTER,
        workload=workload,
        generation=1,
        cause=cause,
        partition=partition_of(workload),
        event_id=caused_event_id(cause or workload, event_type, workload, 0),
    )
    if event_type == "submitted":
        env.submitted.manifest_json = manifest_json
        env.source = "gateway"
        return env
    getattr(env, event_type).SetInParent()
    env.submitted_id = cause
    env.source = "floor"
    missing = EVENT_BYTES[event_type] - env.ByteSize()
    env.source += "." * max(0, missing)
    return env


def event_message(env: Envelope, *, fenced: bool = False) -> tuple[str, bytes, dict[str, str]]:
    """Subject, bytes and headers as muster's publisher sends them; `fenced` as admission's."""
    headers = {MSG_ID: env.event_id, "traceparent": _TRACEPARENT}
    if fenced:
        headers[EXPECTED_LAST_SUBJECT_SEQUENCE] = "0"
        headers[EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT] = (
            f"muster.v1.*.config.partition.{env.partition}"
        )
    return subject_of(env), encode(env), headers


def claim(workload: str, event_id: str) -> tuple[str, bytes, dict[str, str]]:
    """The name's claim: subject in MUSTER_NAMES, value, and the create's fence."""
    value = _ENCODE.encode({"event_id": event_id, "life": 0, "at_s": time.time()})
    value += b" " * max(0, CLAIM_BYTES - len(value))
    key = workload.replace("/", ".")
    return f"$KV.MUSTER_NAMES.{key}", value, {EXPECTED_LAST_SUBJECT_SEQUENCE: "0"}


def pod_key(workload: str) -> str:
    return f"pod.{workload.replace('/', '.')}-main-0"


def pod(workload: str, stage: str) -> bytes:
    """The workload's one pod at `stage` (created, bound, running) as JSON of muster's size."""
    namespace, name = workload.split("/", 1)
    spec: dict[str, object] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]
    }
    if stage != "created":
        spec["nodeName"] = NODE
    annotations = {"muster.dev/pad": ""}
    value = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-main-0",
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": "lq", "muster.dev/workload": name},
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": "Running" if stage == "running" else "Pending"},
    }
    size = len(_ENCODE.encode(value))
    annotations["muster.dev/pad"] = "." * max(0, POD_BYTES[stage] - size)
    return _ENCODE.encode(value)
