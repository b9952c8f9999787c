"""The watcher's status task (Kubernetes only): keeps the status of the cluster's Kueue
Workloads, ClusterQueues and LocalQueues what muster decided.

It follows the cluster's workload events, admission's `queue.status` and the config events
(which queues exist here), folds them into a `StatusBook`, and desires each changed status
from a `StatusSink` (the coalescing, rate-limited `StatusWriter`). A desire returns at once, so
a slow or failing API server never holds up a decision: the newest status wins when it is
written. At start it replays the cluster's events, then desires every status once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from muster.bus.connection import Bus
from muster.bus.subjects import config_subject, queue_subject, workload_subject
from muster.cluster.kube.resources import ObjectRef
from muster.watcher.kueue_status import WORKLOAD_EVENTS, StatusBook

log = logging.getLogger(__name__)


class StatusSink(Protocol):
    def desire(self, ref: ObjectRef, status: Mapping[str, Any]) -> None: ...


def status_subjects(cluster: str) -> list[str]:
    """The subjects whose events change the statuses of `cluster`'s Kueue objects."""
    return [
        *(workload_subject(cluster, e) for e in WORKLOAD_EVENTS),
        queue_subject(cluster),
        config_subject(cluster, ">"),
    ]


def _desire(book: StatusBook, sink: StatusSink, refs: list[ObjectRef]) -> None:
    for ref in refs:
        status = book.status_of(ref)
        if status is not None:
            sink.desire(ref, status)


async def write_statuses(bus: Bus, sink: StatusSink, *, cluster: str, kueue_version: str) -> None:
    """Desire the status of every Kueue object of `cluster` as events change it, until
    cancelled."""
    book = StatusBook(kueue_version=kueue_version)
    subjects = status_subjects(cluster)
    last = await bus.last_sequence()
    if last:
        async for env in bus.replay(subjects, until_sequence=last):
            book.apply(env)
    refs = list(book.refs())
    _desire(book, sink, refs)
    log.info("status of %d Kueue objects of cluster %s desired after replay", len(refs), cluster)
    async for env in bus.replay(subjects, from_sequence=last + 1, follow=True):
        _desire(book, sink, sorted(book.apply(env), key=str))
