"""What the watcher does with a list of the cluster: at a resumed start, its own list
(`know_listed`); at the end of the list of any watch that lists (from 0: its first start, or
once a resumed watch cannot resume), what that watch showed (`Listed`, `drop_unlisted`). It
decides each workload a pod of which is gone, as the watch would have had it shown the
deletion; and it tells each workload it submitted whose object (Job, Kueue Workload) is gone
deleted (`delete_unlisted`, task jobdelete410), with the event ids a watched deletion gives.

Why after a watch's own list and not the watcher's: a resumed watch cannot show every
deletion made while the watcher was away (a Kubernetes 410 Gone: history compacted; a sim
whose tombstones were pruned: task watcher410), so the watcher lists again; a list of its
own, then the watch's, left a gap between the two where a deletion went unseen, and the pod a
ghost holding its group Running (task watcher5). The watch's list and the changes after it
leave no gap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from muster.cluster.backend import ClusterChange
from muster.watcher import translate
from muster.watcher.handlers import WatcherContext, decide_each, publish_deleted
from muster.watcher.pods import PodState

log = logging.getLogger(__name__)

# What `list_workload_objects` lists.
WORKLOAD_KINDS: Final = frozenset({"Job", "JobSet", "Workload"})


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


class Listed:
    """What a list showed: its pods (key and uid, as `PodState` has them) and the lives
    (`translate.incarnation`) of the workloads its objects stand for; the namespaces of
    objects that do not decode (`unreadable`: one may be any workload there)."""

    def __init__(self) -> None:
        self.pods: set[tuple[str, str]] = set()
        self.lives: dict[str, set[str]] = {}
        self.unreadable: set[str] = set()

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]], pods: Iterable[PodState]) -> Listed:
        """A list the watcher made itself: `objects` (`list_workload_objects`) and `pods`."""
        listed = cls()
        for obj in objects:
            listed.add_object(obj)
        listed.pods.update((pod.key, pod.uid) for pod in pods)
        return listed

    def show(self, change: ClusterChange) -> None:
        """A change a listing watch yielded before its list ended. A deletion adds nothing: its
        handler told it."""
        if change.type == "DELETED":
            return
        if change.kind == "Pod":
            meta = change.obj.get("metadata")
            if isinstance(meta, Mapping):  # as `pod_state` reads them
                name = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
                self.pods.add((name, str(meta.get("uid", ""))))
        elif change.kind in WORKLOAD_KINDS:
            self.add_object(change.obj)

    def add_object(self, obj: Mapping[str, Any]) -> None:
        if not translate.is_workload_source(obj):
            return  # a Job's own Kueue Workload, or a Job that names no queue
        try:  # stored data: whatever it holds, the watcher must not crash on it at every start
            wl, problems = translate.workload_of(obj)
        except Exception as exc:
            wl, problems = None, [repr(exc)]
        if wl is None:
            meta = obj.get("metadata")
            namespace = str(meta.get("namespace") or "") if isinstance(meta, Mapping) else ""
            log.warning("a listed object of namespace %r not read: %s", namespace, problems)
            self.unreadable.add(namespace)
            return
        self.lives.setdefault(wl.key, set()).add(translate.incarnation(wl))


def drop_unlisted(
    ctx: WatcherContext,
    listed: Listed,
    *,
    gone: Callable[[Mapping[str, set[str]]], Sequence[str]] = lambda live: (),
) -> int:
    """After a watch's list: drop each pod known that `listed` does not show (by key and
    uid), as its watched deletion would have, and decide its workload, and each workload that
    `gone` (`KvMarks.gone`) names with the pods left (its marks name a pod not there: one
    known from the watcher's own list, or from before a restart); how many workloads."""
    dropped = [
        pod
        for pods in ctx.pods.values()
        for pod in pods.values()
        if (pod.key, pod.uid) not in listed.pods
    ]
    for pod in dropped:
        ctx.drop_pod(pod)
    live = live_of(pod for pods in ctx.pods.values() for pod in pods.values())
    return decide_each(
        ctx, sorted({*(pod.workload for pod in dropped), *gone(live)}), after_delete=True
    )


def delete_unlisted(ctx: WatcherContext, listed: Listed, *, submitted: Mapping[str, str]) -> int:
    """Publish `deleted` for each workload `submitted` (workload → the life its `submitted`
    was about: `KvMarks.submitted`) that no object `listed` stands for in that life any
    more, as its watched deletion would have, with the same event id; how many. A new life
    under the same name (deleted and made again) ends the old one: the watch shows the new one
    as submitted after. A workload of a namespace where a listed object does not decode is
    left alone (it may be that one): it is told once readable or deleted."""
    gone = [
        (workload, mark)
        for workload, mark in sorted(submitted.items())
        if workload.partition("/")[0] not in listed.unreadable
        and not any(translate.same_life(mark, life) for life in listed.lives.get(workload, ()))
    ]
    for workload, mark in gone:
        log.info("%s was deleted while the watch could not show it", workload)
        sent = ctx.marks.load(workload)
        sent.checks, sent.active = {}, None  # its Kueue Workload is gone (`on_kueue_workload`)
        publish_deleted(ctx, translate.deleted_incarnation(workload, mark))
    return len(gone)
