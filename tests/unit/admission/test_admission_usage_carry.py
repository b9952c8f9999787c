"""The QueueLeft records that carry a LocalQueue's fair sharing usage to its new partition
(admission/usage_carry.py): applied once, whichever way a replica reads them."""

from __future__ import annotations

import math

import pytest

from muster.admission.translate import PartitionRecord
from muster.admission.usage_carry import UsageCarry
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
