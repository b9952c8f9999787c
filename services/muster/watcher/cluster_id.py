"""Whether the gateway submits as the cluster this watcher serves; warned at start when not.

The twin of the gateway's check (`gateway/watched.py`), for when the watcher starts after the
gateway has taken Submits: a gateway started with another id (`prod` beside a watcher left at
`local`) submits `prod`'s workloads, whose configuration no watcher publishes, so admission
never gets their Namespaces and no watcher runs them: they wait for ever. What the events
stored say: clusters workloads were submitted to, and those whose watchers publish
configuration. One submitted to but configured by no watcher, and not this watcher's, is
named. A warning, not a refusal: in MultiKueue a worker's watcher runs as another id than
the manager's by design (its own configuration events name it), and the watcher of a
submitted-to cluster may simply not have started yet.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection
from typing import Final

from muster.bus.seen_clusters import (
    SubjectList,
    configuring_clusters,
    submitted_clusters,
    warn_at_start,
)

log = logging.getLogger(__name__)

_UNCONFIGURED: Final = (
    "this watcher runs with --cluster {cluster}, but workloads are submitted to {others}, "
    "whose configuration (Namespaces, queues) no watcher publishes: admission never gets their "
    "Namespaces and no watcher runs them, so they wait for ever; give the gateway this "
    "watcher's --cluster (MUSTER_CLUSTER), or run a watcher as {others}"
)


def unconfigured_warning(
    cluster: str, submitted: Collection[str], configuring: Collection[str]
) -> str:
    """What to warn when workloads were submitted to clusters no watcher configures, other
    than `cluster` (this watcher's: its own configuration may not be published yet); ""
    otherwise."""
    unwatched = sorted(set(submitted) - set(configuring) - {cluster})
    if not unwatched:
        return ""
    return _UNCONFIGURED.format(cluster=cluster, others=", ".join(unwatched))


async def warn_if_unconfigured(bus: SubjectList, cluster: str) -> None:
    """Log `unconfigured_warning` once, at start; a NATS failure only skips the check."""
    await warn_at_start(
        functools.partial(_warning, bus, cluster),
        log=log,
        unchecked=f"not checked whether the gateway submits as cluster {cluster}",
    )


async def _warning(bus: SubjectList, cluster: str) -> str:
    submitted = await submitted_clusters(bus)
    configuring = await configuring_clusters(bus) if submitted else []
    return unconfigured_warning(cluster, submitted, configuring)
