"""Takeover records: a new term of a shard's lease fences out every term before it.

A holder whose event loop stalls after it confirmed its lease and before its decisions leave
the process (nats-py's write buffer) would send them after the lease lapsed, maybe after
another replica took the shard. Every decision is fenced on its partition's last
`config.partition` record (handlers.py, `_fence`), so a term writes one more record on each
partition it decides before it decides anything (`take_over`): JetStream refuses what a lapsed
holder still had in flight, since that was fenced on an older record. The lapsed holder,
reading the record, confirms its lease, which fails, and steps down (`doubt_settled`). It
costs one stored message per partition per rebuild (a start, a term, a partition moved),
none per workload.

Terms are ordered by the lease's revision when acquired (`Term.number`). Each record is written
fenced on the partition's last one, so the records of a partition are in term order: a record
of a later term of this shard than this replica's means it lost the lease (LeaseLostError once
the lease is confirmed lost: a bucket made anew numbers its revisions from 1 again), one of an
earlier term is what this term writes over.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import zlib
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from muster.admission.fact_reader import fact_of
from muster.admission.facts import PartitionRecord, Term
from muster.admission.handlers import Publisher, Reown
from muster.admission.lease import doubt_settled
from muster.admission.rebuild import History
from muster.admission.state import AdmissionState
from muster.bus import BusError, Conflict, Reject, new_event
from muster.bus.connection import Stored
from muster.bus.envelope import EVENT_ID_NAMESPACE
from muster.bus.partitions import token
from muster.bus.subjects import record_filter
from muster.contracts.v1 import events_pb2 as pb

log = logging.getLogger(__name__)

RETRY_S: Final = 0.5  # after NATS failed a write for now
# A term's durable nobody pulls from for this long is deleted by the server: a holder that
# died leaves its own behind (a live one pulls every second; a round of a million pending
# takes minutes).
TERM_DURABLE_IDLE_S: Final = 3600.0

Guard = Callable[[], Awaitable[None]]


class Records(History, Publisher, Protocol):
    """What a takeover writes and reads (`Bus`)."""

    async def last_stored(self, subject_filter: str) -> Stored | None: ...


def term_durable(durable: str, term: Term | None) -> str:
    """The durable consumer a term consumes through: the shard's `durable`, named after the
    term and its owner (a bucket made anew numbers terms from 1 again). A term makes its own
    anew at each rebuild (delete, then create: a consumer's start cannot be changed), and
    JetStream deletes whatever has the name it is given: a holder stalled past its lease
    between its takeover records and that delete would delete its successor's durable under
    one shared name. Under its term's name, it deletes its own. None (no lease): `durable`."""
    if term is None:
        return durable
    return f"{durable}-{term.number}-{zlib.crc32(term.owner.encode()) & 0xFFFF:04x}"


async def take_over(bus: Records, state: AdmissionState, *, guard: Guard) -> None:
    """Write this term's record on each partition this replica decides, each fenced on the
    partition's last record; where a fence was lost, read what was written meanwhile and try
    again. Raises LeaseLostError when a later term of this shard took a partition over, Reown
    when a record moved one. Nothing without a term.

    Written at each rebuild, not once per term: a rebuild may have read its fences from a
    snapshot that holds records the stream no longer does (retention), and a write is where
    that shows (`read_records`)."""
    term, owned = state.term, state.sharding.owned  # as the rebuild left them
    written: set[int] = set()
    while term is not None:
        if state.superseded:
            why, state.superseded = state.superseded, ""
            await doubt_settled(why, guard)
        if state.sharding.owned != owned:
            raise Reown("a config.partition record moved a partition to or from here")
        due = sorted(owned - written)
        if not due:
            log.info("%s took partitions %s over", term, ",".join(map(str, sorted(owned))))
            return
        await guard()  # the lease is still this term's, as for any decision
        fences = [(state.fences.get(p, 0), record_filter(p)) for p in due]
        envs = [_record(state, p, term, after=f[0]) for p, f in zip(due, fences, strict=True)]
        failed: BusError | None = None
        for partition, result in zip(due, await bus.publish_together(envs, fences), strict=True):
            if isinstance(result, int):
                state.apply(PartitionRecord(partition, result, takeover=term), now_s=0.0)
                written.add(partition)
            elif isinstance(result, Conflict):
                await read_records(bus, state, partition)
            elif isinstance(result, Reject):
                raise result  # refused for good (a permission): the service says why
            else:
                failed = result
        if failed is not None:
            log.warning("takeover records not all written, again in %gs: %r", RETRY_S, failed)
            await asyncio.sleep(RETRY_S)


def _record(state: AdmissionState, partition: int, term: Term, *, after: int) -> pb.Envelope:
    """The record; its id is the same when the same write is tried again (JetStream drops
    the copy), another after another record (`after`: the one it is fenced on)."""
    taken = pb.Takeover(shard=term.shard, term=term.number, owner=term.owner)
    name = f"takeover/{term.shard}/{term.number}/{partition}/{after}"
    return new_event(
        "partition_changed",
        pb.PartitionChanged(partition=partition, taken_over=taken),
        cluster=state.default_cluster,
        source=state.source,
        partition=token(partition),
        event_id=str(uuid.uuid5(EVENT_ID_NAMESPACE, name)),  # the same on a retry
    )


async def read_records(bus: Records, state: AdmissionState, partition: int) -> None:
    """Apply `partition`'s records after the last one this replica knows: its fence, a move,
    a takeover. Not the usage a LocalQueue carried: the consumer applies that in its turn.
    Called when a write fenced on the last one known was refused: when none is newer, the ones
    known left the stream (its retention; a snapshot still held them), and the fence drops
    to the last the stream holds, which is what JetStream compares with."""
    after = state.fences.get(partition, 0)
    newer = False
    async for env in bus.replay([record_filter(partition)], from_sequence=after + 1):
        newer = True
        try:
            record = fact_of(env)
        except ValueError as exc:  # as a rebuild, which skips it: it still fences
            log.warning("takeover reads %s#%d: %s", env.type, env.sequence, exc)
            record = None
        shard = takeover = None
        if isinstance(record, PartitionRecord):
            shard, takeover = record.shard, record.takeover
        state.apply(
            PartitionRecord(partition, env.sequence, shard=shard, takeover=takeover), now_s=0.0
        )
    if not newer:
        last = await bus.last_stored(record_filter(partition))
        stored = 0 if last is None else last.sequence
        if stored < after:
            log.warning(
                "partition %d's record #%d is no longer in the stream (retention): its "
                "decisions are fenced on #%d from now on",
                partition,
                after,
                stored,
            )
            state.fences[partition] = stored
