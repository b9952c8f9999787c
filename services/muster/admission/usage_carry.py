"""Admission fair sharing usage that follows a LocalQueue to another replica's partition.

A replica's usage of a LocalQueue is its live workloads' runs (their stories follow them:
homes.py) plus what its retired (finished, deleted) workloads left, which only the replica
deciding its partition holds, in memory and in its snapshots (`EndedUsage`). When a
configuration change moves the LocalQueue's tree into a partition another replica decides,
that replica reads the old partition's history up to its fence (handover.py), and writes what
the retired workloads left into a second `QueueLeft` record (`usage`), fenced like the first.
Every replica reads every record, live and when it rebuilds, so the one deciding the new
partition adds it to the LocalQueue's usage then, restart-safe; the one deciding the old
partition forgets it.

A record is applied once: not again when its writer, which applied it as it wrote it, reads
it back; not when the snapshot a replica restored from is newer (that snapshot's usage holds
it); and a later record of the same move (a handover done again after a restart) replaces
the earlier one instead of adding to it.

A LocalQueue may move on again before the partition it came to was snapshotted. What it
brought there is then in no history of that partition (the record lies in the partition it
came from), so the next handover also reads the records carrying usage into it since its
snapshot (`carried_into`), and carries that along with what retired there. The last such
record holds what the LocalQueue's workloads had retired in that partition before it left, so
the handover starts over from it and adds only what retired there after (handover.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from muster.admission.facts import PartitionRecord
from muster.api.model import AdmissionFairSharingConfig
from muster.core.admission_fair_sharing import AdmissionUsage

log = logging.getLogger(__name__)


def valid_usage(at_s: float, consumed: Mapping[str, float]) -> bool:
    """Whether stored usage can be added: finite, and no amount below 0 (usage only orders
    queues: a bad value is skipped with a warning, never the record or snapshot holding it)."""
    values = (at_s, *consumed.values())
    return all(math.isfinite(v) for v in values) and min(values[1:], default=0.0) >= 0.0


class Carried(NamedTuple):
    sequence: int
    at_s: float
    consumed: dict[str, float]


class UsageCarry:
    """The carried usage this replica applied, by (LocalQueue, partition it came from), and
    per partition the sequence of the snapshot whose usage it restored."""

    def __init__(self) -> None:
        self.applied: dict[tuple[str, int], Carried] = {}
        self.restored: dict[int, int] = {}

    def restored_from(self, partitions: Mapping[int, int]) -> None:
        """A snapshot of these sequences (per partition) gave the usage: it holds what every
        record before it carried there."""
        for partition, sequence in partitions.items():
            self.restored[partition] = max(self.restored.get(partition, 0), sequence)

    def apply(
        self,
        record: PartitionRecord,
        book: AdmissionUsage,
        config: AdmissionFairSharingConfig,
        *,
        owned: frozenset[int],
    ) -> None:
        """Take `record` into `book`: the usage it carries to one of `owned`, or the usage a
        LocalQueue took away from one of `owned`."""
        if not record.local_queue:
            return
        if record.carried is None:
            if record.partition in owned and record.to_partition not in owned:
                book.forget_ended(record.local_queue)  # its new decider carries it
            return
        to, key = record.to_partition, (record.local_queue, record.partition)
        before = self.applied.get(key)
        if to not in owned or record.sequence <= self.restored.get(to, 0):
            return
        if before is not None and before.sequence >= record.sequence:
            return  # read back, or older than the one applied
        at_s, consumed = record.carried[0], dict(record.carried[1])
        if not valid_usage(at_s, consumed):
            log.warning("carried usage of LocalQueue %s skipped: at_s %r, consumed %r",
                        record.local_queue, at_s, consumed)  # fmt: skip
            return
        if before is not None:  # the same move read again: this one replaces it
            book.restore_ended(
                record.local_queue, before.at_s, before.consumed, config=config, sign=-1.0
            )
        book.restore_ended(record.local_queue, at_s, consumed, config=config)
        self.applied[key] = Carried(record.sequence, at_s, consumed)


def carried_into(
    records: Iterable[PartitionRecord], local_queue: str, partition: int, *, leaving_to: int
) -> list[PartitionRecord]:
    """Of `records` (ascending sequences, since `partition`'s snapshot and before the fence of
    the move to `leaving_to`), those carrying `local_queue`'s usage into `partition` that its
    usage there still holds: none from before it was carried out of `partition` by an earlier
    move (that usage went along, and comes back in any record carrying it in again)."""
    kept: list[PartitionRecord] = []
    for record in records:
        if record.local_queue != local_queue or record.carried is None:
            continue
        if record.to_partition == partition:
            kept.append(record)
        elif record.partition == partition and record.to_partition != leaving_to:
            kept.clear()
    return kept
