"""The API server's pod-level resources consistency check (PodLevelResources,
pkg/apis/core/validation `validatePodResourceConsistency`): a pod's own `spec.resources.requests`
must cover what its containers request together (containers and sidecars, or the init peak,
whichever is more: `limit_ranger.pod_total`), resource by resource, for each resource both set.
Run on every pod and every Job's pod template, as ValidatePodSpec runs for both; a pod is
checked after its defaulting (a container's limit is its missing request), a template as
written, as the real server does.

Not modelled: the container limits against the pod-level limits, and the hugepages limits'
total (the same function's other two rules); muster charges requests only.
"""

from __future__ import annotations

from typing import Any

from muster.devtools.apiserver.errors import Cause, bad_value
from muster.devtools.apiserver.limit_ranger import amounts, pod_total


def pod_level_causes(spec: Any, path: str) -> list[Cause]:
    """One cause per resource whose pod-level request (under `path`.resources) is below the
    containers' total, in Kubernetes' words; none without pod-level requests."""
    own = spec.get("resources") if isinstance(spec, dict) else None
    requests = amounts(own.get("requests") if isinstance(own, dict) else None)
    if not requests:
        return []
    causes: list[Cause] = []
    for resource, (total, spelled) in sorted(pod_total(spec, "requests").items()):
        if resource in requests and total > requests[resource][0]:
            causes.append(
                bad_value(
                    f"{path}.resources.requests[{resource}]",
                    requests[resource][1],
                    f"must be greater than or equal to aggregate container requests of {spelled}",
                )
            )
    return causes
