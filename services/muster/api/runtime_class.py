"""node.k8s.io/v1 RuntimeClasses: decoded and checked as the API server checks them.

A pod naming a RuntimeClass costs its `overhead.podFixed` on top of its containers: the API
server's RuntimeClass admission writes it into the pod's `spec.overhead`, and Kueue charges it
to a workload whose pod template sets no overhead of its own (`muster.core.pod_overhead`).
"""

from __future__ import annotations

from muster.api.errors import ObjectErrors
from muster.api.model import ObjectMeta, RuntimeClass
from muster.api.names import dns1123_label_problem
from muster.api.podspec import tolerations
from muster.api.raw import RawRuntimeClass


def runtime_class_from_raw(
    raw: RawRuntimeClass, meta: ObjectMeta, errs: ObjectErrors
) -> RuntimeClass:
    """The RuntimeClass `raw`, its problems recorded in `errs` with their field paths: a
    handler is a DNS label (the CRI's name for the runtime) and each overhead a quantity no
    smaller than zero."""
    if not raw.handler:
        errs.add("handler", "is required")
    elif (problem := dns1123_label_problem(raw.handler)) is not None:
        errs.add("handler", problem)
    pod_fixed = raw.overhead.pod_fixed if raw.overhead is not None else {}
    scheduling = raw.scheduling
    return RuntimeClass(
        meta=meta,
        handler=raw.handler,
        overhead=errs.quantities(pod_fixed, "overhead.podFixed"),
        node_selector=dict(scheduling.node_selector) if scheduling is not None else {},
        tolerations=tolerations(scheduling.tolerations) if scheduling is not None else (),
    )
