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

import logging
from collections.abc import Collection

from muster.bus.errors import BusError
from muster.bus.seen_clusters import SubjectList, configuring_clusters, submitted_clusters

log = logging.getLogger(__name__)


def unconfigured_warning(
    cluster: str, submitted: Collection[str], configuring: Collection[str]
) -> str:
    """What to warn when workloads were submitted to clusters no watcher configures, other
    than `cluster` (this watcher's: its own configuration may not be published yet); ""
    otherwise."""
    unwatched = sorted(set(submitted) - set(configuring) - {cluster})
    if not unwatched:
        return ""
    others = ", ".join(unwatched)
    return (
        f"this watcher runs with --cluster {cluster}, but workloads are submitted to "
        f"{others}, whose configuration (Namespaces, queues) no watcher publishes: admission "
        f"never gets their Namespaces and no watcher runs them, so they wait for ever; give "
        f"the gateway this watcher's --cluster (MUSTER_CLUSTER), or run a watcher as {others}"
    )


async def warn_if_unconfigured(bus: SubjectList, cluster: str) -> None:
    """Log `unconfigured_warning` once, at start; a NATS failure only skips the check."""
    try:
        submitted = await submitted_clusters(bus)
        configuring = await configuring_clusters(bus) if submitted else []
    except BusError as exc:
        log.info("not checked whether the gateway submits as cluster %s: %s", cluster, exc)
        return
    if warning := unconfigured_warning(cluster, submitted, configuring):
        log.warning(warning)
