"""Moving an admission partition to another shard, while everything runs (docs/events.md,
"Partitions").

The move is one `config.partition` record naming the new shard, written only if the partition's
last record is still the one read (the stream's expected last sequence, on the records' subject).
Every decision about the partition is fenced on its last record too, so the old shard's next
decision after the move is refused: it rebuilds without the partition, and the new shard,
which reads the record, rebuilds with it.
"""

from __future__ import annotations

from muster.bus import Bus, Conflict, new_event
from muster.bus.partitions import PARTITIONS, token
from muster.bus.subjects import DEFAULT_CLUSTER, record_filter
from muster.contracts.v1 import events_pb2 as pb


async def last_record(bus: Bus, partition: int) -> int:
    """The stream sequence of `partition`'s last `config.partition` record (0: none)."""
    last = 0
    async for env in bus.replay([record_filter(partition)]):
        last = env.sequence
    return last


async def move_partition(
    bus: Bus, partition: int, shard: int, *, cluster: str = DEFAULT_CLUSTER
) -> int:
    """Make shard `shard` decide `partition` from now on; the record's stream sequence.

    Raises ValueError for a partition or shard out of range. A record written meanwhile by
    someone else is read, and the write tried again after it.
    """
    if not 0 <= partition < PARTITIONS:
        raise ValueError(f"partition: must be in [0, {PARTITIONS}), got {partition}")
    if shard < 0:
        raise ValueError(f"shard: must be >= 0, got {shard}")
    while True:
        last = await last_record(bus, partition)
        record = new_event(
            "partition_changed",
            pb.PartitionChanged(partition=partition, shard=shard),
            cluster=cluster,
            source="operator",
            partition=token(partition),
        )
        try:
            return await bus.publish(
                record, expected_last_subject_sequence=last, fenced_on=record_filter(partition)
            )
        except Conflict:
            continue  # another record came first: move after it
