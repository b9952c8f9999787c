"""`workload.evicted` → `cmd.evict` for the victim's cluster. Pure."""

from __future__ import annotations

from muster.bus import new_event
from muster.contracts.v1 import events_pb2 as pb

SOURCE = "preemption"


def evict_command(evicted: pb.Envelope, *, attempt: int, source: str = SOURCE) -> pb.Envelope:
    """Attempt `attempt` of stopping the pods of `evicted`'s workload, on its cluster.

    The id is derived from the eviction and the attempt, so re-sending one attempt is a
    duplicate JetStream drops, and each new attempt is a new command. Every attempt names the
    eviction (its event id and stream sequence): the binder fences on it, and its
    `eviction_completed` says which eviction it completes. It names the `submitted` the
    eviction is about, as the eviction does: a binder that saw that workload end and its name
    submitted again since drops it, so it never stops the pods of the new workload.
    """
    payload = pb.EvictRequested(
        reason=evicted.evicted.reason,
        message=evicted.evicted.message,
        attempt=attempt,
        eviction_sequence=evicted.sequence,
        eviction_id=evicted.event_id,
    )
    command = new_event(
        "evict_requested",
        payload,
        cluster=evicted.cluster,
        workload=evicted.workload,
        generation=evicted.generation,
        cause=evicted,
        source=source,
        n=attempt,
    )
    command.submitted_id = evicted.submitted_id
    return command
