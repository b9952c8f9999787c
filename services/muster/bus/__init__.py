"""muster.bus: the NATS JetStream layer every muster service stands on (docs/services.md).

Subjects and streams (`subjects`), the envelope codec (`envelope`), its errors (`errors`:
`Retry`, `Reject`, `Conflict`, `Unavailable`, `NotFound`; services never see nats-py's), the
connection and its publish/consume/replay/bucket API (`connection`), in-order consumption
(`ordered`), key-value and object buckets (`kv`, `objects`), leases (`lease`), tracing, and the
service runtime (`service`, imported on its own: it brings in gRPC).
"""

from muster.bus.connection import Bus, BusConfig, connect
from muster.bus.consumer import ConsumerSettings, Handler
from muster.bus.envelope import decode, encode, new_event
from muster.bus.errors import BusError, Conflict, NotFound, Reject, Retry, Unavailable
from muster.bus.subjects import (
    COMMANDS_STREAM,
    DEFAULT_CLUSTER,
    DLQ_STREAM,
    EVENTS_STREAM,
    command_subject,
    config_subject,
    dlq_subject,
    queue_subject,
    subject_of,
    workload_filters,
    workload_subject,
)

__all__ = [
    "COMMANDS_STREAM",
    "DEFAULT_CLUSTER",
    "DLQ_STREAM",
    "EVENTS_STREAM",
    "Bus",
    "BusConfig",
    "BusError",
    "Conflict",
    "ConsumerSettings",
    "Handler",
    "NotFound",
    "Reject",
    "Retry",
    "Unavailable",
    "command_subject",
    "config_subject",
    "connect",
    "decode",
    "dlq_subject",
    "encode",
    "new_event",
    "queue_subject",
    "subject_of",
    "workload_filters",
    "workload_subject",
]
