"""Before the first workload of a run over several clusters: wait until each cluster's
heartbeat lists the nodes written to it.

Dispatch goes by the room heartbeats report: without this wait the first workloads would go to
whichever cluster happened to report first, not where the scenario's order says. A fixed 30 s
ended the wait silently at a load of 20-30, where a gang-permit may take longer to read its
nodes and beat; so the wait is bounded by its progress (`muster.launcher.progress`): it ends
once, for `stall_s`, no more of the nodes were reported and the waiting clusters' gang-permits
used next to no CPU. What is still missing then is returned, for the launcher to say.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from muster.launcher.progress import Progress

POLL_S = 0.1
NAMED_NODES = 3  # a warning names this many missing nodes per cluster, then counts the rest


async def until_reported(
    listed: Callable[[str], Awaitable[Collection[str]]],
    expected: Mapping[str, Collection[str]],
    *,
    cpu_s: Callable[[Collection[str]], float],
    progress: Progress | None = None,
    now_s: Callable[[], float] | None = None,
    poll_s: float = POLL_S,
) -> dict[str, set[str]]:
    """Wait while each cluster of `expected` has nodes its heartbeat has not listed yet
    (`listed(cluster)`: the nodes its last heartbeat lists) and the wait progresses (more nodes
    listed, or `cpu_s(clusters still waiting)` growing); the nodes still missing, by cluster
    (empty: every one reported)."""
    progress = progress or Progress()
    clock = now_s or asyncio.get_running_loop().time
    missing = {cluster: set(names) for cluster, names in expected.items() if names}
    total = sum(map(len, missing.values()))
    while True:
        for cluster in list(missing):
            missing[cluster] -= set(await listed(cluster))
            if not missing[cluster]:
                del missing[cluster]
        if not missing:
            return missing
        # `up`: the nodes reported so far; each one more is progress, as a service coming up is.
        reported = total - sum(map(len, missing.values()))
        if not progress.still_moving(up=reported, cpu_s=cpu_s(list(missing)), now_s=clock()):
            return missing
        await asyncio.sleep(poll_s)


def reported_when_up(node: Mapping[str, Any]) -> bool:
    """Whether a cluster's heartbeat lists `node` as written: a cordoned Node, or one whose
    Ready condition says other than True (the simulated kubelet adds a True one only when
    none is written), takes no pods and is never reported; waiting for it would only stall."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = [
        c.get("status") for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"
    ]
    return not ready or ready[0] == "True"


def not_reported_warning(missing: Mapping[str, Collection[str]], progress: Progress) -> str:
    """The line a run prints when it goes on without every cluster reported."""
    clusters = "; ".join(
        f"{cluster} ({_some(names)})" for cluster, names in sorted(missing.items())
    )
    return (
        f"muster run: warning: heartbeats do not list every Node after {progress.stall_s:g}s "
        f"without progress: {clusters}; workloads are routed by what was reported"
    )


def _some(names: Collection[str]) -> str:
    ordered = sorted(names)
    shown = ", ".join(ordered[:NAMED_NODES])
    more = len(ordered) - NAMED_NODES
    return f"{shown} and {more} more" if more > 0 else shown
