"""One ClusterQueue for the JobSet tests, on the simulated cluster and on Kubernetes alike:
flavor pool-a (nodes labelled `pool: a`) with 4 cpu, preemption of lower priorities within the
queue, priorities `low` (100) and `high` (1000), and LocalQueue `lq` in the given namespace."""

from __future__ import annotations


def preempting_queue(namespace: str) -> str:
    """The objects as multi-document YAML (no `---` after the last)."""
    return f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: pool-a}}
spec: {{nodeLabels: {{pool: a}}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {{name: low}}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {{name: high}}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  namespaceSelector: {{}}
  preemption: {{withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: pool-a, resources: [{{name: cpu, nominalQuota: 4}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: {namespace}, name: lq}}
spec: {{clusterQueue: cq}}
"""
