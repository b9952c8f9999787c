"""The QueueLeft records that carry a LocalQueue's fair sharing usage to its new partition
(admission/usage_carry.py): applied once, whichever way a replica reads them."""

from __future__ import annotations

import math

import pytest

from muster.admission.facts import PartitionRecord
from muster.admission.usage_carry import UsageCarry, carried_into
from muster.api.model import AdmissionFairSharingConfig
from muster.core.admission_fair_sharing import AdmissionUsage

CONFIG = AdmissionFairSharingConfig(usage_half_life_s=600.0)
OLD, NEW = 3, 4
MINE = frozenset({NEW})


def carried(sequence: int, cpu: float, *, at_s: float = 100.0) -> PartitionRecord:
    return PartitionRecord(
        OLD, sequence, local_queue="ns/a", to_partition=NEW, carried=(at_s, (("cpu", cpu),))
    )


def cpu(book: AdmissionUsage) -> float:
    return book.consumed("ns/a", now_s=100.0, config=CONFIG).get("cpu", 0.0)


def test_a_record_read_back_or_older_than_the_one_applied_adds_nothing() -> None:
    carry, book = UsageCarry(), AdmissionUsage()
    carry.apply(carried(7, 2.0), book, CONFIG, owned=MINE)
    carry.apply(carried(7, 2.0), book, CONFIG, owned=MINE)  # its writer reads it back
    carry.apply(carried(5, 9.0), book, CONFIG, owned=MINE)
    assert cpu(book) == pytest.approx(2.0)


def test_the_same_move_read_again_replaces_what_the_first_read_carried() -> None:
    carry, book = UsageCarry(), AdmissionUsage()
    carry.apply(carried(7, 2.0), book, CONFIG, owned=MINE)
    carry.apply(carried(9, 3.0), book, CONFIG, owned=MINE)
    assert cpu(book) == pytest.approx(3.0)


def test_a_record_older_than_the_restored_snapshot_is_in_its_usage_already() -> None:
    carry, book = UsageCarry(), AdmissionUsage()
    carry.restored_from({NEW: 8})
    carry.apply(carried(7, 2.0), book, CONFIG, owned=MINE)
    assert cpu(book) == 0.0
    carry.apply(carried(9, 3.0), book, CONFIG, owned=MINE)
    assert cpu(book) == pytest.approx(3.0)


def test_usage_carried_elsewhere_is_not_taken_and_the_old_decider_forgets_it() -> None:
    carry, book = UsageCarry(), AdmissionUsage()
    carry.apply(carried(7, 2.0), book, CONFIG, owned=frozenset({OLD}))
    assert cpu(book) == 0.0
    book.restore_ended("ns/a", 100.0, {"cpu": 1.0}, config=CONFIG)
    fence = PartitionRecord(OLD, 6, local_queue="ns/a", to_partition=NEW)
    carry.apply(fence, book, CONFIG, owned=frozenset({OLD}))
    assert cpu(book) == 0.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_a_bad_amount_is_skipped(bad: float) -> None:
    carry, book = UsageCarry(), AdmissionUsage()
    carry.apply(carried(7, bad), book, CONFIG, owned=MINE)
    assert cpu(book) == 0.0


def moved(sequence: int, old: int, new: int, cpu: float | None = None) -> PartitionRecord:
    usage = None if cpu is None else (100.0, (("cpu", cpu),))
    return PartitionRecord(old, sequence, local_queue="ns/a", to_partition=new, carried=usage)


def test_a_handover_takes_the_usage_carried_into_the_old_partition_since_it_came_back() -> None:
    # ns/a came 1 -> NEW (seq 2), left NEW -> 5 (seq 4, taking that usage along), came back
    # 5 -> NEW (seq 6, bringing it again); now it leaves NEW for 8, fenced at seq 9.
    records = [
        moved(1, 1, NEW),
        moved(2, 1, NEW, 2.0),
        PartitionRecord(NEW, 3, shard=1),
        moved(4, NEW, 5, 2.0),
        moved(6, 5, NEW, 2.5),
        PartitionRecord(OLD, 7, local_queue="ns/b", to_partition=NEW, carried=(1.0, ())),
        moved(8, NEW, 8, 2.5),  # this move's carry, written before by a handover restarted
    ]
    found = carried_into(records, "ns/a", NEW, leaving_to=8)
    assert [r.sequence for r in found] == [6]
    assert [r.sequence for r in carried_into(records[:3], "ns/a", NEW, leaving_to=8)] == [2]
