"""What one workload of `bench e2e`'s one-per-Submit burst stores, for `bench floor` to store.

The layout is today's (LAYOUT): the one-write claim (`--name-claims submitted`, as every
launcher of muster starts its gateway) and pods made on their nodes with no `bound` for them
(`--bound-events binds`, as every launcher starts its binder). The messages and their sizes are
muster's (measured on `bench e2e --shards 1`, burst of one workload per Submit, main c94fb47a
with the gateway's `submitted` claims): per workload six stored, each with its PubAck,

| writer | message | data bytes | headers |
|---|---|---:|---|
| gateway | `submitted` (Workload JSON) on its name's subject: the claim | 629 | id, tp, name fence|
| admission | `admitted` (the manifest's copy in it) | 727 | id, tp, partition fence |
| gang-permit | `gang_permitted` (placed from `submitted`, `admitted`) | 255 | id, tp |
| binder | the pod created on its node, in the simulated cluster's bucket | 820 | create fence |
| sim-cluster | the pod Running | 946 | revision fence |
| watcher | `running` | 202 | id, tp |

(id: `Nats-Msg-Id`; tp: `traceparent`; a fence: `Nats-Expected-Last-Subject-Sequence`, on the
name's filter in every cluster or the partition's record by `...-Subject`.)

The events are real `Envelope`s on muster's own subjects; those whose payload is a decision
(admitted, gang_permitted, running) carry the payload's message empty, and every event
is padded to muster's size in `source`, since what the floor measures is bytes moved and
decoded, not what they say. The pods are Pod-shaped JSON padded in an annotation.
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
from muster.bus.subjects import name_filter, named_subject, subject_of
from muster.contracts.v1.events_pb2 import Envelope

CLUSTER: Final = "local"
NAMESPACE: Final = "bench"
PARTITIONS: Final = 16
EVENT_BYTES: Final = {
    "submitted": 629,
    "admitted": 727,
    "gang_permitted": 255,
    "running": 202,
}
POD_BYTES: Final = {"created": 820, "running": 946}
# What `bench floor` prints it plays, and the counts its test holds it to.
STORED: Final = 6
DELIVERED: Final = 13
LAYOUT: Final = (
    f"today's: {STORED} stored, {DELIVERED} delivered per workload (the `submitted` is the "
    "name's claim; pods made on their nodes, no `bound` for them)"
)
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
    else:
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


def claimed(env: Envelope) -> tuple[str, bytes, dict[str, str]]:
    """A Submit's one write: its `submitted` on its name's subject, fenced on that name in
    every cluster (a name never stored: at 0), as the gateway's one-write claim stores it."""
    headers = {
        MSG_ID: env.event_id,
        "traceparent": _TRACEPARENT,
        EXPECTED_LAST_SUBJECT_SEQUENCE: "0",
        EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: name_filter(env.workload),
    }
    return named_subject(env), encode(env), headers


def pod_key(workload: str) -> str:
    return f"pod.{workload.replace('/', '.')}-main-0"


def pod_message(workload: str, stage: str, *, revision: int) -> tuple[str, bytes, dict[str, str]]:
    """The pod's write at `stage` in the simulated cluster's bucket, fenced as muster's store
    writes it: on the revision it was read at (0: a create)."""
    subject = f"$KV.MUSTER_SIM_{CLUSTER}.{pod_key(workload)}"
    return subject, pod(workload, stage), {EXPECTED_LAST_SUBJECT_SEQUENCE: str(revision)}


def pod(workload: str, stage: str) -> bytes:
    """The workload's one pod at `stage` (created on its node, running) as JSON of muster's
    size."""
    namespace, name = workload.split("/", 1)
    spec: dict[str, object] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        "nodeName": NODE,
    }
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
