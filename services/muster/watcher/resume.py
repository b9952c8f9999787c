"""What a resumed watcher does with a list of the pods, at its start (`know_listed`) and when
its watch cannot resume (`drop_unlisted`), used by `service._watch`: it decides each workload
a pod of which is gone, as the watch would have had it shown the deletion. A resumed watch
cannot show every deletion made while the watcher was away: after a Kubernetes 410 Gone
(history compacted) the backend lists again itself, and has never shown those pods; a sim
whose tombstones were pruned shows nothing of them (task watcher410).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from muster.watcher.handlers import WatcherContext, decide_each
from muster.watcher.pods import PodState


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
