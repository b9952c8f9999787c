"""Subjects, event types and streams of contract v1 (docs/events.md), derived from the proto.

A subject is `muster.v1.<cluster>.<kind>.<event>`; an event's type is `<kind>.<event>`, named
after its field in the `Envelope.payload` oneof (`admitted` → `workload.admitted`). A workload
event that names its admission partition (`Envelope.partition`, `partitions.py`) has one more
subject token, the partition, and so does a `config.partition` record. One that names none (it
is about no Kueue workload, its publisher did not know, or it was stored before partitions) has
not: every admission replica reads those, so readers filter on both (`workload_filters`).
A gateway's `submitted` has one more again, its workload's name (`name_key`, one or more tokens),
so that a Submit's one write is fenced on its name across clusters (`name_filter`;
docs/events.md, "One-write claims"): readers of `submitted` read `<subject>.<partition>.>` too.
Services build the subjects they publish and consume with the functions here, never by hand.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from nats.js import api

from muster.contracts.v1 import events_pb2

PREFIX: Final = "muster.v1"
DEFAULT_CLUSTER: Final = "local"

EVENTS_STREAM: Final = "MUSTER_EVENTS"
COMMANDS_STREAM: Final = "MUSTER_COMMANDS"
DLQ_STREAM: Final = "MUSTER_DLQ"

_TOKEN = re.compile(r"[A-Za-z0-9_-]+")
# A token names a cluster (a MultiKueueCluster's metadata.name: at most 253) or a consumer.
# Unbounded, one in a subject can pass nats-server's 4 KiB protocol line: the server then
# ends the connection of whoever published it.
MAX_TOKEN_CHARS: Final = 253
# "dlq" would put a cluster's subjects next to the dead letters (`muster.v1.dlq.<consumer>`).
_RESERVED_CLUSTERS: Final = frozenset({"dlq"})

# Payload fields that are not about one workload's life; every other field is `workload.<field>`.
_NOT_WORKLOAD_EVENTS: Final = {
    "queue_status": "queue.status",
    "config_applied": "config.applied",
    "config_deleted": "config.deleted",
    "evict_requested": "cmd.evict",
    "apply_requested": "cmd.apply",
    "partition_changed": "config.partition",
}
# Events whose subject ends with the partition token.
_PARTITIONED_KINDS: Final = ("workload.", "config.partition")
# Workload events a gateway stores with their name after the partition token (`named_subject`).
NAMED_EVENTS: Final = frozenset({"submitted"})
# JetStream's key characters in non-empty dot-separated tokens: a KV key, and a name's tokens.
_KEY = re.compile(r"[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*")


def _event_types() -> dict[str, str]:
    oneof = events_pb2.Envelope.DESCRIPTOR.oneofs_by_name["payload"]
    return {f.name: _NOT_WORKLOAD_EVENTS.get(f.name, f"workload.{f.name}") for f in oneof.fields}


EVENT_TYPES: Final[Mapping[str, str]] = MappingProxyType(_event_types())
"""Payload field name → event type (`"admitted"` → `"workload.admitted"`)."""

PAYLOAD_FIELDS: Final[Mapping[str, str]] = MappingProxyType(
    {event_type: field for field, event_type in EVENT_TYPES.items()}
)
"""Event type → payload field name (`"cmd.evict"` → `"evict_requested"`)."""


def is_token(value: str) -> bool:
    """Whether `value` can be one subject token (and a consumer name): [A-Za-z0-9_-]+, at most
    MAX_TOKEN_CHARS."""
    return len(value) <= MAX_TOKEN_CHARS and _TOKEN.fullmatch(value) is not None


def check_token(value: str, *, what: str) -> str:
    """Return `value` if it is a valid subject token; raise ValueError naming `what` if not."""
    if len(value) > MAX_TOKEN_CHARS:
        raise ValueError(f"{what} must be at most {MAX_TOKEN_CHARS} characters, got {len(value)}")
    if not is_token(value):
        raise ValueError(f"{what} must match [A-Za-z0-9_-]+, got {value!r}")
    return value


def check_cluster(cluster: str) -> str:
    """Return `cluster` if it is a valid cluster id; raise ValueError if not."""
    if cluster in _VALID_CLUSTERS:  # a Submit checks its cluster four times on the way
        return cluster
    check_token(cluster, what="cluster id")
    if cluster in _RESERVED_CLUSTERS:
        raise ValueError(f"cluster id {cluster!r} is reserved")
    if len(_VALID_CLUSTERS) >= _VALID_CLUSTERS_MAX:  # ids from requests: kept bounded
        _VALID_CLUSTERS.clear()
    _VALID_CLUSTERS.add(cluster)
    return cluster


# Cluster ids found valid; only valid ids enter, so a hit needs no check. Set operations are
# atomic under the GIL: the gateway's gRPC threads may check ids too.
_VALID_CLUSTERS: set[str] = set()
_VALID_CLUSTERS_MAX: Final = 1024


def _event_token(event: str) -> str:
    # "*" and ">" are allowed so that consumers can filter on every event of a kind.
    return event if event in ("*", ">") else check_token(event, what="event name")


def _cluster_token(cluster: str) -> str:
    return cluster if cluster == "*" else check_cluster(cluster)


def workload_subject(cluster: str, event: str) -> str:
    """`muster.v1.<cluster>.workload.<event>`, without a partition token (as stored before
    partitions); `cluster` or `event` may be a wildcard (`>`: every workload event)."""
    return f"{PREFIX}.{_cluster_token(cluster)}.workload.{_event_token(event)}"


def workload_filters(cluster: str, event: str, partition: str = "*") -> tuple[str, ...]:
    """The filters that read `event` about `cluster` in `partition` (a token, or `*`): as
    stored now (with the token, and a name after it for a named event) and, for every
    partition, as stored before partitions."""
    base = workload_subject(cluster, event)
    if event == ">":
        return (base,)
    token = partition if partition == "*" else check_token(partition, what="partition")
    return (base, *partition_filters(base, event, token))


def partition_filters(base: str, event: str, token: str) -> tuple[str, ...]:
    """The filters of `event` on subject `base` in partition `token` (or `*`): `<base>.<token>`
    and, for an event a gateway stores with its name (`NAMED_EVENTS`), `<base>.<token>.>`."""
    at = f"{base}.{token}"
    return (at, f"{at}.>") if event in NAMED_EVENTS else (at,)


def valid_key(key: str) -> bool:
    """Whether `key` can be stored: JetStream's key characters in non-empty dot-separated
    tokens (`lq.ns.../x` has an empty one: the server would refuse its subject)."""
    return _KEY.fullmatch(key) is not None


def name_key(workload: str) -> str:
    """The name of workload `workload` ("<namespace>/<name>") as subject tokens (and a key of
    `MUSTER_NAMES`), whatever its cluster: admission takes a name for one workload in every
    cluster (`admission.ledger.Ledger.submit`). Names are DNS-1123 (muster.api checks them) and
    a namespace is one token, so the readable form `<namespace>.<name>` is one name's only;
    any other is hashed under a token no namespace can be ("=")."""
    namespace, _, name = workload.partition("/")
    key = f"{namespace}.{name}"
    if valid_key(key) and len(key) <= _NAME_KEY_CHARS:
        return key
    return f"=sha256.{hashlib.sha256(workload.encode()).hexdigest()}"


# A readable name key longer than this is hashed: a namespace (63) and a name (253) fit it.
_NAME_KEY_CHARS: Final = 320


def named_subject(env: events_pb2.Envelope) -> str:
    """The subject a gateway stores `submitted` `env` on, the Submit's one write:
    `muster.v1.<cluster>.workload.submitted.<partition>.<name key>`. `env` names its partition."""
    if env.WhichOneof("payload") not in NAMED_EVENTS or not env.partition:
        raise ValueError(f"{env.type} of {env.workload!r} has no name subject")
    return f"{subject_of(env)}.{name_key(env.workload)}"


def name_filter(workload: str) -> str:
    """Every cluster's and partition's named `submitted` of `workload`'s name: what a
    gateway's `submitted` is fenced on (one workload per name at a time, in every cluster)."""
    return f"{workload_subject('*', 'submitted')}.*.{name_key(workload)}"


def command_subject(cluster: str, command: str) -> str:
    """`muster.v1.<cluster>.cmd.<command>`: a work-queue command for the binder of `cluster`."""
    return f"{PREFIX}.{_cluster_token(cluster)}.cmd.{_event_token(command)}"


def queue_subject(cluster: str) -> str:
    """`muster.v1.<cluster>.queue.status`."""
    return f"{PREFIX}.{_cluster_token(cluster)}.queue.status"


def config_subject(cluster: str, event: str) -> str:
    """`muster.v1.<cluster>.config.<event>` (`applied` or `deleted`)."""
    return f"{PREFIX}.{_cluster_token(cluster)}.config.{_event_token(event)}"


def record_filter(partition: int) -> str:
    """Every cluster's `config.partition` records of admission partition `partition`: what an
    admission decision about its workloads is fenced on (docs/events.md, "Partitions")."""
    return f"{PREFIX}.*.config.partition.{partition}"


def binder_durable(cluster: str) -> str:
    """The binder's durable consumer of `cluster`'s admissions and permits (gang-permit reads
    its ack floor at a restart)."""
    return f"binder-{check_cluster(cluster)}"


def dlq_subject(consumer: str) -> str:
    """`muster.v1.dlq.<consumer>`: where `consumer` copies the messages it could not handle."""
    return f"{PREFIX}.dlq.{check_token(consumer, what='consumer name')}"


def event_subject(cluster: str, event_type: str) -> str:
    """The subject of an event of type `event_type` (`workload.admitted`) about `cluster`."""
    if event_type not in PAYLOAD_FIELDS:
        raise ValueError(f"unknown event type {event_type!r}")
    return f"{PREFIX}.{check_cluster(cluster)}.{event_type}"


def partitioned(event_type: str) -> bool:
    """Whether events of `event_type` carry their partition as their subject's last token."""
    return event_type.startswith(_PARTITIONED_KINDS)


def subject_of(env: events_pb2.Envelope) -> str:
    """The subject `env` is published on: `muster.v1.<env.cluster>.<env.type>`, plus its
    partition token for a workload event or a `config.partition` record."""
    subject = event_subject(env.cluster, env.type)
    if not partitioned(env.type):
        return subject
    if not env.partition:
        return subject  # read by every admission replica, as before partitions
    return f"{subject}.{check_token(env.partition, what='partition')}"


def stream_of(event_type: str) -> str:
    """The stream that stores events of type `event_type`: commands go to the work queue."""
    return COMMANDS_STREAM if event_type.startswith("cmd.") else EVENTS_STREAM


# How long MUSTER_EVENTS keeps an event: the horizon of everything read back from it (a name's
# claim in MUSTER_NAMES is kept as long, `muster.bus.setup.buckets`).
EVENTS_KEPT_S: Final = 7 * 24 * 3600.0


def stream_configs(*, replicas: int = 1) -> tuple[api.StreamConfig, ...]:
    """The three streams of contract v1, as `Bus.ensure_streams` creates or updates them, each
    stored on `replicas` servers of a NATS cluster (3 survives the loss of one)."""
    day_s = 24 * 3600.0
    return (
        api.StreamConfig(
            name=EVENTS_STREAM,
            description="muster workload, queue and config events: the history to rebuild from",
            subjects=[f"{PREFIX}.*.workload.>", f"{PREFIX}.*.queue.>", f"{PREFIX}.*.config.>"],
            retention=api.RetentionPolicy.LIMITS,
            max_age=EVENTS_KEPT_S,
            max_bytes=10 * 1024**3,
            duplicate_window=120.0,
            storage=api.StorageType.FILE,
            num_replicas=replicas,
        ),
        api.StreamConfig(
            name=COMMANDS_STREAM,
            description="muster commands: each is done once, by one replica",
            subjects=[f"{PREFIX}.*.cmd.>"],
            retention=api.RetentionPolicy.WORK_QUEUE,
            duplicate_window=120.0,
            storage=api.StorageType.FILE,
            num_replicas=replicas,
        ),
        api.StreamConfig(
            name=DLQ_STREAM,
            description="messages a muster consumer could not handle, as they were",
            # One token, not ">": `muster.v1.dlq.>` would overlap `muster.v1.*.workload.>`,
            # which the server refuses. Consumer names are single tokens anyway.
            subjects=[f"{PREFIX}.dlq.*"],
            retention=api.RetentionPolicy.LIMITS,
            max_age=7 * day_s,
            duplicate_window=120.0,
            storage=api.StorageType.FILE,
            num_replicas=replicas,
        ),
    )
