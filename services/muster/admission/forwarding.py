"""Forwarded events (`workload.forwarded`): what is stored in one partition for another. Pure.

A workload's story follows it when its home moves (homes.py), and a report that still names
its old partition is passed on (docs/events.md, "Partitions"). Each forwarded event carries
another as it was stored, with its stream sequence; the reader takes the inner one as if it
had been stored in its own partition (`unwrap`). Ids derive from the inner event's id, the
partition it goes to and the story it belongs to, so a forward repeated after a crash is one
JetStream drops within its window; beyond it, a story is taken only where its workload is new
and a report only once (`Forwards`).

Why one replica forwards to itself (a one-shard `muster up` shows a `forwarded` right after
the first `submitted`s): the gateway and the watcher name a workload's partition from
`MUSTER_PARTITIONS`, which admission writes with its views, about 0.1 s (`visibility_interval_s`)
after the configuration change that put the LocalQueue in a tree. A workload submitted before
then (in the manifest that creates its LocalQueue, or right after it) is stored in its
LocalQueue's stand-in partition (`partitions.queue_tree`), not its home. Its story is forwarded
home although this replica decides both partitions: a partition's subjects must hold every
story of its workloads, because they are all that a replica reads when it rebuilds a partition
or takes it over (more shards later, a `config.partition` record); left behind, the workload
would be unknown where its home is decided then. The cost is one stored message per such
workload, read by the replica deciding its home (e2e burst, 1 shard: 34 of 3 000 workloads,
the first after the configuration, 0.011 per workload).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from muster.admission.facts import (
    CheckUpdated,
    Delete,
    Fact,
    FactError,
    Finish,
    GangRejected,
    PodsReady,
    RequestsRefused,
    SetActive,
    SetReclaimable,
    Stopped,
)
from muster.api.model import WorkloadKey
from muster.bus import Reject, decode, new_event
from muster.bus.partitions import token
from muster.contracts.v1 import events_pb2 as pb

# Reports taken through a forward, remembered by their own id: a report forwarded again after
# a replica restarted (past JetStream's two-minute window) is not applied twice.
REPORTS_KEPT: Final = 100_000


def unwrap(env: pb.Envelope, *, max_event_bytes: int) -> tuple[pb.Envelope, pb.WorkloadForwarded]:
    """The event `env` forwards, as if stored where `env` is: its sequence and partition are
    `env`'s (so it is kept, snapshot and replayed as this partition's). Raises FactError for
    one that cannot be read (dead-lettered like any)."""
    try:
        inner = decode(env.forwarded.envelope, max_bytes=max_event_bytes)
    except Reject as err:
        raise FactError(f"forwarded event: {err}") from None
    if inner.workload != env.workload or inner.WhichOneof("payload") == "forwarded":
        raise FactError(f"forwarded event of {inner.workload!r} under {env.workload!r}")
    inner.sequence = env.sequence
    inner.partition = env.partition
    return inner, env.forwarded


def original(data: bytes, sequence: int) -> tuple[pb.Envelope, bytes, int]:
    """A kept event as first stored: a forwarded one's inner event (bytes and sequence)."""
    env = decode(data, max_bytes=len(data) + 1)
    if env.WhichOneof("payload") != "forwarded":
        return env, data, sequence
    inner_data = env.forwarded.envelope
    return decode(inner_data, max_bytes=len(inner_data) + 1), inner_data, env.forwarded.sequence


def forwarded(
    data: bytes,
    sequence: int,
    *,
    to_partition: int,
    from_partition: int | None,
    local_queue: str,
    source: str,
    story_sequence: int | None = None,
) -> pb.Envelope:
    """The forward of the event stored as `data` at `sequence` to `to_partition`.

    `story_sequence`: None for a report forwarded on its own; 0 for a story's `submitted`, then
    the sequence that forwarded `submitted` was stored at, for the rest of its story.
    """
    inner, data, sequence = original(data, sequence)
    story = story_sequence is not None
    payload = pb.WorkloadForwarded(
        envelope=data,
        sequence=sequence,
        local_queue=local_queue,
        from_partition=from_partition or 0,
        story=story,
        story_sequence=story_sequence or 0,
    )
    cause = pb.Envelope(event_id=f"{inner.event_id}/forwarded/{to_partition}/{story_sequence or 0}")
    return new_event(
        "forwarded",
        payload,
        cluster=inner.cluster,
        workload=inner.workload,
        generation=inner.generation,
        cause=cause,
        source=source,
        now_ns=inner.time_unix_nano,
        partition=token(to_partition),
    )


def reported_key(fact: Fact) -> WorkloadKey | None:
    """The workload a report (a fact from outside admission) is about; None for a submission,
    configuration, placement preemption or decision."""
    match fact:
        case (
            Finish(key)
            | Delete(key)
            | Stopped(key)
            | PodsReady(key)
            | SetActive(key)
            | SetReclaimable(key)
            | CheckUpdated(key)
            | GangRejected(key)
            | RequestsRefused(key)
        ):
            return key
    return None


class Forwards:
    """What a replica took through forwards: each story's opening, and each report's id."""

    def __init__(self) -> None:
        self.stories: dict[str, int] = {}  # workload -> sequence of the forward that opened it
        self.reports: OrderedDict[str, None] = OrderedDict()

    def takes(
        self, forward: pb.WorkloadForwarded, inner: pb.Envelope, *, known: bool, sequence: int
    ) -> bool:
        """Whether to apply `inner`, forwarded at `sequence`; `known`: the workload is."""
        if not forward.story:
            if inner.event_id in self.reports:
                return False
            self.reports[inner.event_id] = None
            if len(self.reports) > REPORTS_KEPT:
                self.reports.popitem(last=False)
            return True
        if forward.story_sequence == 0:  # a story opens: taken where the workload is new
            if known:
                return False
            self.stories[inner.workload] = sequence
            return True
        return self.stories.get(inner.workload) == forward.story_sequence

    def forget(self, workload: str) -> None:
        self.stories.pop(workload, None)
