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
would pay for every workload of every tree only to drop them. For the same reason a replica
reads `pods_ready` and `running` (which tells pods ready as they start) only while
waitForPodsReady is on (`unread_reports`): they change nothing admission decides otherwise, and
they were half of what a replica at 4 shards received. Its
snapshots say so (`Snapshot.unread`), and a replica that needs them replays them from the
stream when it rebuilds from such a snapshot (rebuild.py); a Configuration that turns it on
while a replica runs makes it rebuild (handlers.py, Reown).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from muster.admission.facts import RECORDED, WORKLOAD_FACTS
from muster.api.model import KueueConfig
from muster.bus.partitions import PARTITIONS
from muster.bus.subjects import config_subject, partition_filters, workload_subject

GLOBAL_FACTS: Final = ("placement_preempted",)  # read in every partition
REPORTS: Final = tuple(f for f in WORKLOAD_FACTS if f not in GLOBAL_FACTS)
CONFIG_SUBJECTS: Final = (config_subject("*", ">"),)
PODS_READY: Final = ("pods_ready", "running")  # a running tells pods ready too
NO_REPORTS: Final[frozenset[str]] = frozenset()


def unread_reports(kueue: KueueConfig | None) -> frozenset[str]:
    """The reports a replica deciding with Kueue's configuration `kueue` does not read:
    `pods_ready` and `running` while waitForPodsReady is off (Kueue's default)."""
    if kueue is not None and kueue.wait_for_pods_ready.enable:
        return NO_REPORTS
    return frozenset(PODS_READY)


def _reports(unread: Collection[str]) -> list[str]:
    return [r for r in REPORTS if r not in unread]


def _legacy(events: Collection[str]) -> list[str]:
    """The filters of `events` stored without a partition (before partitions, or by a publisher
    that did not know it: one token fewer): every replica reads those, as before partitions.
    (A forward always names its partition.)"""
    return [workload_subject("*", e) for e in events]


def _partitioned(events: Collection[str], partitions: Collection[int]) -> list[str]:
    """Filters of `events` in `partitions` (one wildcard when that is every partition), a
    gateway's `submitted` with its name after the partition too (`partition_filters`)."""
    tokens = ["*"] if len(partitions) == PARTITIONS else [str(p) for p in sorted(partitions)]
    return [
        f for t in tokens for e in events for f in partition_filters(workload_subject("*", e), e, t)
    ]


def consumer_subjects(
    partitions: Collection[int], *, unread: Collection[str] = NO_REPORTS
) -> list[str]:
    """The filters of the consumer of a replica deciding `partitions` that does not read the
    reports in `unread`."""
    reports = _reports(unread)
    return [
        *_partitioned((*reports, "forwarded"), partitions),
        *(f"{workload_subject('*', e)}.*" for e in GLOBAL_FACTS),
        *_legacy((*reports, *GLOBAL_FACTS, *RECORDED)),
        *CONFIG_SUBJECTS,
    ]


def replay_subjects(
    partitions: Collection[int], *, unread: Collection[str] = NO_REPORTS
) -> list[str]:
    """What a rebuild replays for `partitions` (configuration comes before, on its own): their
    reports (but `unread`), forwards and decisions, and events stored before partitions."""
    reports = _reports(unread)
    return [
        *_partitioned((*reports, *RECORDED, "forwarded"), partitions),
        *_legacy((*reports, *GLOBAL_FACTS, *RECORDED)),
    ]


def report_subjects(reports: Collection[str], partitions: Collection[int]) -> list[str]:
    """The filters of `reports` about `partitions`, and of those stored without a partition."""
    return [*_partitioned(reports, partitions), *_legacy(reports)]
