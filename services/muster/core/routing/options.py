"""A workload's options (its declared queue, then its alternatives) as routing compares them.

Pure functions of the Workload: the podsets each option runs, the quota they take and how
long each is expected to run (`muster.dev/run-seconds`, or the alternative's `runSeconds`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from muster.api.model import Alternative, PodSet, Workload
from muster.api.times import run_seconds_of
from muster.core.routing.model import Demand, RouteOption


def options_of(wl: Workload) -> tuple[RouteOption, ...]:
    """The declared queue (index 0), then each alternative in order of preference."""
    declared_s = declared_run_seconds(wl)
    options = [
        RouteOption(
            index=0,
            queue_name=wl.queue_name,
            pod_sets=wl.pod_sets,
            demand=demand_of(wl.pod_sets),
            run_s=declared_s,
        )
    ]
    for i, alternative in enumerate(wl.alternatives, start=1):
        pod_sets = pod_sets_for(wl, alternative)
        run_s = alternative.run_seconds if alternative.run_seconds is not None else declared_s
        options.append(
            RouteOption(
                index=i,
                queue_name=alternative.queue_name,
                pod_sets=pod_sets,
                demand=demand_of(pod_sets),
                run_s=run_s,
            )
        )
    return tuple(options)


def pod_sets_for(wl: Workload, alternative: Alternative) -> tuple[PodSet, ...]:
    """`wl`'s podsets as `alternative` runs them: each pod's requests replaced where it says,
    resources it sets to 0 dropped (the rewritten job gives up its GPU)."""
    override = alternative.requests
    if override is None:
        return wl.pod_sets
    return tuple(
        msgspec.structs.replace(ps, requests=_overridden(ps.requests, override))
        for ps in wl.pod_sets
    )


def _overridden(requests: Mapping[str, int], override: Mapping[str, int]) -> dict[str, int]:
    merged = {**requests, **override}
    return {name: amount for name, amount in merged.items() if amount != 0}


def demand_of(pod_sets: Iterable[PodSet]) -> Demand:
    """What the podsets take in all, per resource (requests times count)."""
    total: dict[str, int] = {}
    for ps in pod_sets:
        for resource, amount in ps.requests.items():
            total[resource] = total.get(resource, 0) + amount * ps.count
    return total


def declared_run_seconds(wl: Workload) -> float | None:
    """`muster.dev/run-seconds` of the workload, or None when absent or not a duration."""
    return run_seconds_of(wl.meta.annotations)


def run_seconds_on(wl: Workload, queue_name: str) -> float | None:
    """How long `wl` (as declared) runs once admitted through LocalQueue `queue_name`."""
    for option in options_of(wl):
        if option.queue_name == queue_name:
            return option.run_s
    return declared_run_seconds(wl)
