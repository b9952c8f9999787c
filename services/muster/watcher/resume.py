"""What a resumed watcher does with the pods listed at its start (`know_listed`), used by
`service._watch`: it knows them, and decides each of their workloads, and each workload with a
pod it told about that the list no longer shows, as the watch would have. A resumed watch
cannot show every deletion made while the watcher was away: after a Kubernetes 410 Gone
(history compacted) the backend lists again itself, and has never shown those pods; a sim
whose tombstones were pruned shows nothing of them (task watcher410).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from muster.watcher.handlers import WatcherContext, decide_pods
from muster.watcher.pods import PodState

log = logging.getLogger(__name__)


def live_of(listed: Iterable[PodState]) -> dict[str, set[str]]:
    """Workload → the uids of its pods in `listed`."""
    live: dict[str, set[str]] = {}
    for state in listed:
        live.setdefault(state.workload, set()).add(state.uid)
    return live


def know_listed(ctx: WatcherContext, listed: Sequence[PodState], *, gone: Sequence[str]) -> int:
    """Know the pods `listed` at a resume without publishing anything (`WatcherContext.seed`),
    then decide, as after a pod's deletion, each workload listed and each of `gone`
    (`KvMarks.gone`: its marks name a pod not listed); how many were decided.

    Every listed workload, not only those whose marks name a pod gone: the marks name only
    the pods an event covered, so a pod deleted unseen may be one no event named (a group's
    second pod, made after the first ran), and what its deletion made due (the rest
    succeeded, the rest ready) would never be told. Decisions are level-triggered
    (`due_events`, against the marks read back), so what was told is not told again, and what
    is due gets the id the watched deletion would have given it: a restart in the middle
    publishes nothing twice. A bug deciding one workload is logged and the others decided:
    stored data never stops a start."""
    for state in listed:
        ctx.seed(state)
    workloads = sorted({*live_of(listed), *gone})
    for workload in workloads:
        try:
            decide_pods(workload, ctx, after_delete=True)
        except Exception:
            log.exception("deciding the pods of %s listed at start failed", workload)
    return len(workloads)
