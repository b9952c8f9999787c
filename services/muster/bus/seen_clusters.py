"""Which cluster ids the stored events name, read from their subjects: those whose watchers
have published configuration, and those workloads were submitted to. The gateway and the
watcher each check at start that the other runs with the same `--cluster`
(`gateway/watched.py`, `watcher/cluster_id.py`): a mismatch leaves every workload waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from muster.bus.connection import Stored
from muster.bus.errors import BusError
from muster.bus.partitions import PARTITIONS
from muster.bus.subjects import config_subject, workload_subject

CONFIG_SUBJECTS: Final = config_subject("*", ">")  # muster.v1.<cluster>.config.<event>
# Without the name a gateway's `submitted` has after the partition (`named_subject`): listing
# those would list every workload name the stream holds, so the named ones are read as the
# last stored in each partition (`named_submitted_clusters`).
_SUBMITTED: Final = workload_subject("*", "submitted")
SUBMITTED_SUBJECTS: Final = (_SUBMITTED, f"{_SUBMITTED}.*")
NAMED_SUBMITTED: Final = tuple(f"{_SUBMITTED}.{p}.>" for p in range(PARTITIONS))


class SubjectList(Protocol):
    """What the checks read (`muster.bus.Bus`)."""

    async def stored_subjects(self, pattern: str) -> list[str]: ...

    async def last_stored(self, subject_filter: str) -> Stored | None: ...


async def clusters_of(bus: SubjectList, *patterns: str) -> list[str]:
    """The cluster ids of the stored subjects matching any of `patterns` (sorted)."""
    found: set[str] = set()
    for pattern in patterns:
        found.update(subject.split(".")[2] for subject in await bus.stored_subjects(pattern))
    return sorted(found)


async def configuring_clusters(bus: SubjectList) -> list[str]:
    """The clusters whose watchers have published configuration events."""
    return await clusters_of(bus, CONFIG_SUBJECTS)


async def submitted_clusters(bus: SubjectList) -> list[str]:
    """The clusters workloads were submitted to (by a gateway, or a watcher's Jobs): every one
    of the `submitted` without a name, and those of the last named one in each partition."""
    unnamed = await clusters_of(bus, *SUBMITTED_SUBJECTS)
    return sorted({*unnamed, *await named_submitted_clusters(bus)})


async def named_submitted_clusters(bus: SubjectList) -> list[str]:
    """The clusters of the last `submitted` stored on a name's subject (a gateway's one-write
    claim, `--name-claims submitted`) in each partition: sixteen reads of one message, where
    listing them would list every name. A gateway that submits as another cluster id is seen
    while it is, in some partition, the last to have submitted a workload; one whose Submits
    were all followed by another cluster's in every partition is not (a warning's heuristic,
    not a census)."""
    found = await asyncio.gather(*(bus.last_stored(f) for f in NAMED_SUBMITTED))
    return sorted({s.envelope.cluster for s in found if s is not None and s.envelope is not None})


async def warn_at_start(
    warning: Callable[[], Awaitable[str]], *, log: logging.Logger, unchecked: str
) -> None:
    """Log what `warning()` says, if anything, once; a NATS failure only skips the check
    (logged as `unchecked`, with why)."""
    try:
        said = await warning()
    except BusError as exc:
        log.info("%s: %s", unchecked, exc)
        return
    if said:
        log.warning(said)
