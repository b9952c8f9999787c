"""A LocalQueue's workloads fetched from another replica's partition (homes.py, `Handover`).

When a configuration change moves a LocalQueue's tree into a partition this replica decides
from one it does not, the replica that decided it may be slow, or gone. So this replica:
1. fences the old partition: a `config.partition` record (`QueueLeft`) written only if that
   partition's last record is still the one it knows. From then on the old decider's decisions
   about that partition are refused (they are fenced on its last record), so nothing it decides
   afterwards lands;
2. reads the old partition's history up to that record: the newest snapshot covering it, then
   its events after the snapshot, into a scratch ledger and log;
3. returns the stories of the LocalQueue's live workloads, which the round forwards here and
   applies before it decides (relocation.py), and writes what its retired workloads left in
   its admission fair sharing usage into a second record (usage_carry.py).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from muster.admission.fact_reader import fact_of
from muster.admission.facts import PartitionRecord
from muster.admission.homes import Handover, queue_key
from muster.admission.rebuild import (
    SnapshotStore,
    in_steps,
    left_out_of,
    replay_event,
    restoring_partitions,
)
from muster.admission.relocation import Story
from muster.admission.snapshot import CompactLog
from muster.admission.state import AdmissionState
from muster.admission.subjects import replay_subjects, unread_reports
from muster.admission.takeover import Records, read_records
from muster.admission.usage_carry import carried_into
from muster.bus import Conflict, new_event
from muster.bus.envelope import EVENT_ID_NAMESPACE
from muster.bus.partitions import PARTITIONS, token
from muster.bus.subjects import record_filter
from muster.contracts.v1 import events_pb2 as pb

log = logging.getLogger(__name__)


class StoryFetcher:
    """`relocation.StoryFetch` over the bus and the snapshots' bucket."""

    def __init__(
        self,
        bus: Records,
        state: AdmissionState,
        snapshots: SnapshotStore,
        stream_created: Callable[[], str],
        *,
        max_event_bytes: int,
    ) -> None:
        self.bus = bus
        self.state = state
        self.snapshots = snapshots
        self.stream_created = stream_created
        self.max_event_bytes = max_event_bytes

    async def __call__(self, handover: Handover) -> list[Story]:
        fence = await self._fence(handover)
        # With the configuration's admission fair sharing: its book learns what the
        # LocalQueue's retired workloads left (usage_carry.py).
        scratch = AdmissionState(source=self.state.source, kueue=self.state.engine.kueue)
        history = CompactLog(scratch.ledger)
        partition, low = handover.from_partition, 0
        stream = self.stream_created()
        unread = unread_reports(self.state.engine.kueue)  # what this replica reads
        for item in await self.snapshots.available(stream=stream, at_most=fence):
            snapshot = None
            if partition in item.partitions:
                snapshot = await self.snapshots.load(item, stream=stream)
            if snapshot is not None:
                left_out = await left_out_of(self.bus, snapshot, (partition,), unread=unread)
                await in_steps(  # the lease's renewal runs between its steps
                    restoring_partitions(
                        scratch,
                        snapshot,
                        (partition,),
                        history=history,
                        max_event_bytes=self.max_event_bytes,
                        left_out=left_out,
                    )
                )
                low = snapshot.sequence
                break
        # The record that last brought the LocalQueue's usage back into the partition holds
        # what it left there before (carried out, then back): replayed runs before it are
        # in it, so the usage starts over from it (usage_carry.py, `carried_into`).
        back = await self._came_back(handover, scratch, after=low, fence=fence)
        subjects = replay_subjects((partition,), unread=unread)
        if back is not None:
            await self._replay(scratch, history, subjects, after=low, until=back.sequence)
            _start_over(scratch, back)
            low = back.sequence
        await self._replay(scratch, history, subjects, after=low, until=fence)
        stories = [
            history.story_of(entry.key)
            for entry in scratch.ledger.live()
            if queue_key(entry.workload.meta.namespace, entry.queue_name) == handover.local_queue
        ]
        log.info(
            "LocalQueue %s came from partition %d: %d live workloads fetched",
            handover.local_queue,
            partition,
            len(stories),
        )
        await self._carry(handover, scratch, fence)
        return stories

    async def _replay(
        self,
        scratch: AdmissionState,
        history: CompactLog,
        subjects: list[str],
        *,
        after: int,
        until: int,
    ) -> None:
        async for env in self.bus.replay(subjects, from_sequence=after + 1, until_sequence=until):
            replay_event(scratch, env, history=history, max_event_bytes=self.max_event_bytes)

    async def _came_back(
        self, handover: Handover, scratch: AdmissionState, *, after: int, fence: int
    ) -> PartitionRecord | None:
        """The last record after the old partition's snapshot (and before the fence) that
        carried the LocalQueue's usage into it (records of the partitions it came from:
        usage_carry.py `carried_into`); None without one, or without fair sharing."""
        book = scratch.engine.state.admission_usage
        fair = scratch.engine.state.config.kueue.admission_fair_sharing
        if book is None or fair is None:
            return None
        subjects = [record_filter(p) for p in range(PARTITIONS)]
        records = []
        async for env in self.bus.replay(subjects, from_sequence=after + 1, until_sequence=fence):
            try:
                record = fact_of(env)
            except ValueError as exc:  # skipped as a rebuild skips it
                log.warning("handover skips %s#%d: %s", env.type, env.sequence, exc)
                continue
            if isinstance(record, PartitionRecord) and record.sequence < fence:
                records.append(record)
        found = carried_into(
            records, handover.local_queue, handover.from_partition, leaving_to=handover.to_partition
        )
        return found[-1] if found else None

    async def _carry(self, handover: Handover, scratch: AdmissionState, fence: int) -> None:
        """Write what the LocalQueue's retired workloads left in its fair sharing usage into
        a second record, and apply it here (usage_carry.py)."""
        book = scratch.engine.state.admission_usage
        ended = None if book is None else book.ended(handover.local_queue)
        if ended is None:
            return
        at_s, consumed = ended
        left = pb.QueueLeft(
            local_queue=handover.local_queue,
            to_partition=handover.to_partition,
            usage=pb.CarriedUsage(at_s=at_s, consumed=consumed),
        )
        sequence = await self._fence(handover, left, tag=f"usage/{fence}", at_least=fence)
        carried = (at_s, tuple(sorted(consumed.items())))
        record = PartitionRecord(
            handover.from_partition,
            sequence,
            local_queue=handover.local_queue,
            to_partition=handover.to_partition,
            carried=carried,
        )
        self.state.apply(record, now_s=0.0)
        log.info("LocalQueue %s brought its usage from partition %d: %r",
                 handover.local_queue, handover.from_partition, consumed)  # fmt: skip

    async def _fence(
        self,
        handover: Handover,
        left: pb.QueueLeft | None = None,
        *,
        tag: str = "",
        at_least: int = 0,
    ) -> int:
        """Write the record that fences the old partition (`left`, by default the one that
        says the LocalQueue left); its sequence. A newer record than the last one known (and
        than `at_least`) written meanwhile is read and taken into account, then the write is
        tried again."""
        partition = handover.from_partition
        state = self.state
        if left is None:
            left = pb.QueueLeft(
                local_queue=handover.local_queue, to_partition=handover.to_partition
            )
        known = max(state.fences.get(partition, 0), at_least)
        record = new_event(
            "partition_changed",
            pb.PartitionChanged(partition=partition, queue_left=left),
            cluster=state.default_cluster,
            source=state.source,
            partition=token(partition),
            event_id=str(uuid.uuid5(EVENT_ID_NAMESPACE, f"{handover}/{tag}{known}")),
        )
        while True:
            expected = max(state.fences.get(partition, 0), at_least)
            try:
                return await self.bus.publish(
                    record,
                    expected_last_subject_sequence=expected,
                    fenced_on=record_filter(partition),
                )
            except Conflict:
                await read_records(self.bus, self.state, partition)


def _start_over(scratch: AdmissionState, back: PartitionRecord) -> None:
    """The LocalQueue's retired usage in `scratch` is what `back` brought back into the
    partition: what retired there before it left went along, and is in `back`."""
    book = scratch.engine.state.admission_usage
    fair = scratch.engine.state.config.kueue.admission_fair_sharing
    if book is None or fair is None:
        return
    book.forget_ended(back.local_queue)
    scratch.usage_carry.apply(back, book, fair, owned=frozenset((back.to_partition,)))
