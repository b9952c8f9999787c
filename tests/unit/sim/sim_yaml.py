"""Keyword factories for scenario YAML, shared by the simulator tests.

Scenarios are data: each factory returns the YAML a user would write, so the tests go through
the same decoding as `muster simulate`.
"""

from __future__ import annotations

import json

from muster.api import decode_yaml
from muster.sim import SimulationResult, build_scenario, simulate


def cluster(*, cpu: str = "4", checks: tuple[str, ...] = (), preemption: str = "Never") -> str:
    """Namespace team-a, flavor `default`, ClusterQueue `main` with `cpu`, LocalQueue `lq`."""
    return f"""\
apiVersion: v1
kind: Namespace
metadata: {{name: team-a}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: default}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: main}}
spec:
  namespaceSelector: {{}}
  preemption: {{withinClusterQueue: {preemption}}}
  admissionChecks: {json.dumps(list(checks))}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: default, resources: [{{name: cpu, nominalQuota: "{cpu}"}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: team-a, name: lq}}
spec: {{clusterQueue: main}}
"""


def admission_check(name: str, *, result: str | None = None) -> str:
    annotations = {} if result is None else {"muster.dev/check-result": result}
    return f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {{name: {name}, annotations: {json.dumps(annotations)}}}
spec: {{controllerName: example.com/{name}}}
"""


def workload(
    name: str,
    *,
    cpu: str = "1",
    count: int = 1,
    priority: int = 0,
    after: float | None = None,
    runs: float | None = None,
    created: str | None = None,
    annotations: dict[str, str] | None = None,
) -> str:
    """Workload team-a/<name> on LocalQueue lq; `after`/`runs` set the muster.dev timings.

    `annotations` adds others: `workload("w", annotations={"muster.dev/check.prov": "Ready"})`.
    """
    notes = dict(annotations or {})
    if after is not None:
        notes["muster.dev/submit-after"] = f"{after:g}"
    if runs is not None:
        notes["muster.dev/run-seconds"] = f"{runs:g}"
    stamp = "" if created is None else f", creationTimestamp: {created}"
    return f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: team-a, name: {name}, annotations: {json.dumps(notes)}{stamp}}}
spec:
  queueName: lq
  priority: {priority}
  podSets:
  - name: main
    count: {count}
    template:
      spec:
        containers:
        - name: main
          resources: {{requests: {{cpu: "{cpu}"}}}}
"""


def pods_ready_config(*, timeout: str = "10s", recovery: str | None = None) -> str:
    extra = f", recoveryTimeout: {recovery}" if recovery is not None else ""
    return f"""\
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady: {{enable: true, timeout: {timeout}{extra}}}
"""


def run(*documents: str, until_s: float | None = None) -> SimulationResult:
    """Decode the documents as one scenario file and simulate it."""
    objects, errors = decode_yaml("---\n".join(documents), source="test.yaml")
    assert not errors, errors
    return simulate(build_scenario(objects), until_s=until_s)


def timeline(result: SimulationResult, *types: str) -> list[tuple[float, str, str]]:
    """(time, type, workload name) of the events, only of `types` when given."""
    return [
        (event.time, str(event.type), event.object.split("/", 1)[1])
        for event in result.events
        if not types or event.type in types
    ]


def node(name: str, *, cpu: str = "4", after: float | None = None) -> str:
    """A v1 Node with `cpu` allocatable; `after` sets muster.dev/submit-after."""
    notes = {} if after is None else {"muster.dev/submit-after": f"{after:g}"}
    return f"""\
apiVersion: v1
kind: Node
metadata: {{name: {name}, annotations: {json.dumps(notes)}}}
status: {{allocatable: {{cpu: "{cpu}"}}}}
"""


def pod(
    name: str,
    *,
    cpu: str = "1",
    after: float | None = None,
    runs: float | None = None,
    scheduler: str = "muster",
    workload_ref: str | None = None,
) -> str:
    """A v1 Pod team-a/<name> for `scheduler`; `workload_ref` joins "<workload>/<podGroup>"."""
    notes = {}
    if after is not None:
        notes["muster.dev/submit-after"] = f"{after:g}"
    if runs is not None:
        notes["muster.dev/run-seconds"] = f"{runs:g}"
    ref = ""
    if workload_ref is not None:
        name_, group = workload_ref.split("/")
        ref = f"\n  workloadRef: {{name: {name_}, podGroup: {group}}}"
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{namespace: team-a, name: {name}, annotations: {json.dumps(notes)}}}
spec:
  schedulerName: {scheduler}{ref}
  containers: [{{name: main, resources: {{requests: {{cpu: "{cpu}"}}}}}}]
"""


def scheduling_workload(
    name: str, *, group: str = "workers", min_count: int | None = None, after: float = 0
) -> str:
    """A scheduling.k8s.io Workload team-a/<name> with one pod group: a gang of `min_count`,
    or basic when None."""
    policy = "{basic: {}}" if min_count is None else f"{{gang: {{minCount: {min_count}}}}}"
    return f"""\
apiVersion: scheduling.k8s.io/v1alpha1
kind: Workload
metadata: {{namespace: team-a, name: {name}, annotations: {{muster.dev/submit-after: "{after:g}"}}}}
spec: {{podGroups: [{{name: {group}, policy: {policy}}}]}}
"""
