"""Build, encode and decode `muster.v1.Envelope`s: the one message type on every muster subject.

`new_event` gives an event caused by another a deterministic id, so a handler that runs again
after a crash republishes the same ids and JetStream's dedupe drops the copies (docs/events.md).
`decode` turns anything it cannot accept into `Reject`, which the consume loop dead-letters;
`decode_stored` also refuses an envelope stored on a subject that is not its own.
"""

from __future__ import annotations

import time
import uuid
from typing import Final

from google.protobuf.message import DecodeError, Message

from muster.api.ids import uuid4_text, uuid5_text
from muster.bus.errors import Reject
from muster.bus.subjects import EVENT_TYPES, NAMED_EVENTS, PREFIX, check_cluster, name_key
from muster.bus.tracing import trace_headers
from muster.contracts.v1.events_pb2 import Envelope

DEFAULT_MAX_EVENT_BYTES: Final = 1024 * 1024

# The namespace of caused events' uuid5 ids. Fixed forever: changing it breaks dedupe across
# a rolling upgrade.
EVENT_ID_NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_DNS, "events.muster.dev")


def event_type_of(payload_field: str) -> str:
    """The event type of a payload field (`admitted` → `workload.admitted`); ValueError if none."""
    try:
        return EVENT_TYPES[payload_field]
    except KeyError:
        raise ValueError(f"Envelope has no payload field {payload_field!r}") from None


def caused_event_id(cause_id: str, event_type: str, workload: str, n: int) -> str:
    """The id of the `n`th event of `event_type` about `workload` that `cause_id` led to."""
    return uuid5_text(EVENT_ID_NAMESPACE, f"{cause_id}/{event_type}/{workload}/{n}")


def new_event(
    payload_field: str,
    payload: Message,
    *,
    cluster: str,
    workload: str = "",
    generation: int = 0,
    cause: Envelope | None = None,
    source: str,
    n: int = 0,
    now_ns: int | None = None,
    partition: str | None = None,
    event_id: str | None = None,
) -> Envelope:
    """A new envelope carrying `payload` in field `payload_field`, ready to publish.

    The id is `event_id` when given (a writer's own deterministic id: none is drawn to be
    thrown away), else `uuid5(cause.event_id/type/workload/n)` when there is a cause (use `n`
    to tell apart several events of one type and workload caused by one event), else random.
    The
    trace context is the current span's, else the cause's. `sequence` stays 0: readers set it.
    The admission partition is `partition`, else the cause's when it is about the same workload
    (docs/events.md, "Partitions").
    """
    event_type = event_type_of(payload_field)
    check_cluster(cluster)
    env = Envelope(
        type=event_type,
        time_unix_nano=time.time_ns() if now_ns is None else now_ns,
        cluster=cluster,
        workload=workload,
        generation=generation,
        source=source,
    )
    if partition is not None:
        env.partition = partition
    elif cause is not None and cause.workload == workload:
        env.partition = cause.partition
    try:
        getattr(env, payload_field).CopyFrom(payload)
    except TypeError as exc:
        raise TypeError(f"payload for {payload_field!r}: {exc}") from None
    if cause is not None:
        env.cause = cause.event_id
    if event_id is not None:
        env.event_id = event_id
    elif cause is not None:
        env.event_id = caused_event_id(cause.event_id, event_type, workload, n)
    else:
        env.event_id = uuid4_text()
    headers = trace_headers()
    if "traceparent" in headers:
        env.traceparent = headers["traceparent"]
        env.tracestate = headers.get("tracestate", "")
    elif cause is not None:
        env.traceparent = cause.traceparent
        env.tracestate = cause.tracestate
    return env


def payload_of(env: Envelope) -> Message:
    """The message in `env`'s payload oneof; Reject if it has none."""
    field = env.WhichOneof("payload")
    if field is None:
        raise Reject("envelope has no payload")
    payload: Message = getattr(env, field)
    return payload


def encode(env: Envelope) -> bytes:
    """The wire bytes of `env`."""
    return env.SerializeToString()


def decode(data: bytes, *, max_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> Envelope:
    """The envelope in `data`; raises Reject when it is oversized, undecodable or unknown.

    Unknown means: no payload this contract knows (a newer writer's payload decodes as an
    unknown field), or a `type` that does not match the payload.
    """
    if len(data) > max_bytes:
        raise Reject(f"envelope is {len(data)} bytes, over the limit of {max_bytes}")
    env = Envelope()
    try:
        env.ParseFromString(data)
    except DecodeError as exc:
        raise Reject(f"undecodable envelope: {exc}") from None
    field = env.WhichOneof("payload")
    if field is None:
        raise Reject(f"envelope {env.event_id or '?'} of type {env.type!r} has no known payload")
    if EVENT_TYPES[field] != env.type:
        raise Reject(
            f"envelope {env.event_id or '?'} has type {env.type!r} "
            f"but carries {field!r} ({EVENT_TYPES[field]})"
        )
    return env


def _named(env: Envelope, own: str) -> str:
    """The subject a gateway stores `env` on with its name (`subjects.named_subject`), or ""."""
    if env.WhichOneof("payload") not in NAMED_EVENTS:
        return ""
    return f"{own}.{env.partition}.{name_key(env.workload)}"


def decode_stored(
    data: bytes, *, subject: str, max_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> Envelope:
    """The envelope stored on `subject`; raises Reject as `decode` does, and when `subject` is
    not the one it is published on (`subject_of`: its cluster and type, and its partition or
    none, as a writer from before partitions published; a gateway's `submitted`, its name too).

    NATS checks who may publish on a subject, never what the envelope says: without this, a
    worker cluster's services, allowed only their own cluster's subjects, could speak for
    another cluster (a `finished` of a workload that runs there) or as another service (an
    `admitted` on their watcher's subject)."""
    env = decode(data, max_bytes=max_bytes)
    # Compared, not built with subject_of's checks: this runs for every event every reader
    # reads. A cluster id has no dot, so its subject token is exactly the envelope's cluster.
    own = f"{PREFIX}.{env.cluster}.{env.type}"
    if subject != own and (
        not env.partition
        or "." in env.cluster
        or (subject != f"{own}.{env.partition}" and subject != _named(env, own))
    ):
        raise Reject(
            f"envelope {env.event_id or '?'} ({env.type} of cluster {env.cluster[:80]!r}) was "
            f"published on {subject[:200]!r}, not on its own subject {own[:200]!r}"
        )
    return env
