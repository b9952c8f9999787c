"""Whether a watcher publishes as the gateway's cluster; warned at start when none does.

A workload submitted through the gateway is its `--cluster`'s: admission reads that cluster's
Namespaces (each cluster's are its own: `muster.core.config_owners.config_key`) and that
cluster's watcher runs it. A gateway started with another id than its watcher's (`prod`
beside a watcher left at `local`) takes every Submit, and each workload then waits for ever on
a namespace no watcher reported. A platform team wants to hear it at start, naming both ids;
refusing to start would crash-loop a gateway that merely came up before its watcher (or
before any configuration was applied), so it is a warning, and nothing at all while no
watcher has published configuration yet.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from muster.bus.seen_clusters import SubjectList, configuring_clusters, warn_at_start

log = logging.getLogger(__name__)


def unwatched_warning(cluster: str, configuring: Collection[str]) -> str:
    """What to warn when clusters have published configuration and `cluster` is not one of
    them; "" otherwise."""
    if not configuring or cluster in configuring:
        return ""
    watchers = ", ".join(sorted(configuring))
    return (
        f"the gateway runs with --cluster {cluster}, but the watchers publish configuration "
        f"(Namespaces, queues) as {watchers} only: a workload submitted here is {cluster}'s, "
        f"whose Namespaces admission never gets and which no watcher runs, so it waits for "
        f"ever; give the gateway its watcher's --cluster (MUSTER_CLUSTER)"
    )


async def warn_if_unwatched(bus: SubjectList, cluster: str) -> None:
    """Log `unwatched_warning` once, at start; a NATS failure only skips the check."""

    async def warning() -> str:
        return unwatched_warning(cluster, await configuring_clusters(bus))

    unchecked = f"not checked whether a watcher runs as cluster {cluster}"
    await warn_at_start(warning, log=log, unchecked=unchecked)
