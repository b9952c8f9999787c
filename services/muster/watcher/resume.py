"""What a resumed watcher does with a list of the pods, at its start (`know_listed`) and when
its watch cannot resume (`drop_unlisted`), used by `service._watch`: it decides each workload
a pod of which is gone, as the watch would have had it shown the deletion; and with a list of
the workload objects (Jobs, Kueue Workloads), it tells each one it submitted that is gone
deleted (`delete_unlisted`, task jobdelete410). A resumed watch
cannot show every deletion made while the watcher was away: after a Kubernetes 410 Gone
(history compacted) the backend lists again itself, and has never shown those pods; a sim
whose tombstones were pruned shows nothing of them (task watcher410).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from muster.watcher import translate
from muster.watcher.handlers import WatcherContext, decide_each, publish_deleted
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
    publishes nothing twice."""
    for state in listed:
        ctx.seed(state)
    return decide_each(ctx, sorted({*live_of(listed), *gone}), after_delete=True)


def drop_unlisted(ctx: WatcherContext, listed: Sequence[PodState]) -> int:
    """After a watch that could not resume (`ExpiredError`): drop each pod known that
    `listed` does not show (by key and uid), as its watched deletion would have, and decide
    its workload; how many workloads. `ctx.pods` must hold every pod there was (a resumed
    watcher knows the list of its start, then what its watch showed)."""
    shown = {(s.workload, s.key, s.uid) for s in listed}
    gone = [
        pod
        for pods in ctx.pods.values()
        for pod in pods.values()
        if (pod.workload, pod.key, pod.uid) not in shown
    ]
    for pod in gone:
        ctx.drop_pod(pod)
    return decide_each(ctx, sorted({pod.workload for pod in gone}), after_delete=True)


def delete_unlisted(
    ctx: WatcherContext, listed: Sequence[Mapping[str, Any]], *, submitted: Mapping[str, str]
) -> int:
    """Publish `deleted` for each workload `submitted` (workload → the life its `submitted`
    was about: `KvMarks.submitted`) that no object `listed` (`list_workload_objects`) stands
    for in that life any more, as its watched deletion would have, with the same event id;
    how many. A new life under the same name (deleted and made again) ends the old one: the
    watch shows the new one as submitted after. A workload of a namespace where a listed
    object does not decode is left alone (it may be that one): it is told once readable or
    deleted."""
    lives: dict[str, set[str]] = {}
    unreadable: set[str] = set()
    for obj in listed:
        if not translate.is_workload_source(obj):
            continue  # a Job's own Kueue Workload, or a Job that names no queue
        try:  # stored data: whatever it holds, the watcher must not crash on it at every start
            wl, problems = translate.workload_of(obj)
        except Exception as exc:
            wl, problems = None, [repr(exc)]
        if wl is None:
            meta = obj.get("metadata")
            namespace = str(meta.get("namespace") or "") if isinstance(meta, Mapping) else ""
            log.warning("a listed object of namespace %r not read: %s", namespace, problems)
            unreadable.add(namespace)
            continue
        lives.setdefault(wl.key, set()).add(translate.incarnation(wl))
    gone = [
        (workload, mark)
        for workload, mark in sorted(submitted.items())
        if workload.partition("/")[0] not in unreadable
        and not any(translate.same_life(mark, life) for life in lives.get(workload, ()))
    ]
    for workload, mark in gone:
        log.info("%s was deleted while the watch could not show it", workload)
        sent = ctx.marks.load(workload)
        sent.checks, sent.active = {}, None  # its Kueue Workload is gone (`on_kueue_workload`)
        publish_deleted(ctx, translate.deleted_incarnation(workload, mark))
    return len(gone)
