"""What an admission replica reads: the subjects of its own partitions, filtered by the server.

Its consumer reads, for the partitions it decides, the reports it acts on and what is forwarded
to them (`consumer_subjects`); every `config.*` event (each replica knows the whole
configuration, which says which tree a LocalQueue is in, and every `config.partition` record);
every `placement_preempted` (its victims may be in any partition); and, of the event types it
reads, those that name no partition (stored before partitions, or reports whose publisher did
not know it). It reads its own decisions only when it rebuilds (`replay_subjects`): it keeps
them as it publishes them.

Filters name event types, never every workload event: the pods' reports (`pods_pending`,
`running`, `bound`, ...) are most of a workload's events, and a replica that received them
would pay for every workload of every tree only to drop them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from muster.admission.translate import RECORDED, WORKLOAD_FACTS
from muster.bus.partitions import PARTITIONS
from muster.bus.subjects import config_subject, workload_subject

GLOBAL_FACTS: Final = ("placement_preempted",)  # read in every partition
REPORTS: Final = tuple(f for f in WORKLOAD_FACTS if f not in GLOBAL_FACTS)
CONFIG_SUBJECTS: Final = (config_subject("*", ">"),)
# The workload events admission reads that name no partition (stored before partitions, or
# their publisher did not know it: one token fewer): read by every replica, as before
# partitions. (A forward always names its partition.)
LEGACY: Final = tuple(workload_subject("*", e) for e in (*WORKLOAD_FACTS, *RECORDED))


def _partitioned(events: Collection[str], partitions: Collection[int]) -> list[str]:
    """Filters of `events` in `partitions` (one wildcard when that is every partition)."""
    if len(partitions) == PARTITIONS:
        return [f"{workload_subject('*', e)}.*" for e in events]
    return [f"{workload_subject('*', e)}.{p}" for p in sorted(partitions) for e in events]


def consumer_subjects(partitions: Collection[int]) -> list[str]:
    """The filters of the consumer of a replica deciding `partitions`."""
    return [
        *_partitioned((*REPORTS, "forwarded"), partitions),
        *(f"{workload_subject('*', e)}.*" for e in GLOBAL_FACTS),
        *LEGACY,
        *CONFIG_SUBJECTS,
    ]


def replay_subjects(partitions: Collection[int]) -> list[str]:
    """What a rebuild replays for `partitions` (configuration comes before, on its own): their
    reports, forwards and decisions, and events stored before partitions."""
    return [*_partitioned((*REPORTS, *RECORDED, "forwarded"), partitions), *LEGACY]
