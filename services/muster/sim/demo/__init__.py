"""The built-in demo scenario that `muster run` replays: two teams sharing one ClusterQueue.

Ten Jobs arrive a few seconds apart on LocalQueues lq-team-a and lq-team-b, which both feed
ClusterQueue `cluster-queue` (cpu, memory and nvidia.com/gpu on flavors `default-flavor` and
`gpu`; four Nodes, the two A100 ones tainted so that only the `gpu` flavor's pods land
there). Most run at priority `low`; `urgent-train` arrives at `high` when the GPUs are taken,
so it preempts a low-priority workload, which runs again later. Beside Kueue, team-a starts
`dist-train`, a Workload API gang of four pods that gang-permit places all at once.
"""

from __future__ import annotations

SOURCE = "<built-in demo>"
ABOUT = (
    "the built-in demo: 10 Jobs of teams a and b on ClusterQueue cluster-queue, "
    "and a Workload API gang of 4"
)

_CONFIG = """\
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {team: a}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b, labels: {team: b}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu}
spec:
  nodeLabels: {cloud.example.com/accelerator: nvidia-a100}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
---
apiVersion: v1
kind: Node
metadata: {name: node-general, labels: {kubernetes.io/hostname: node-general}}
status:
  allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "2", pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: node-a100-1
  labels: {kubernetes.io/hostname: node-a100-1, cloud.example.com/accelerator: nvidia-a100}
spec:
  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
status:
  allocatable: {cpu: "4", memory: 16Gi, nvidia.com/gpu: "2", pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: node-a100-2
  labels: {kubernetes.io/hostname: node-a100-2, cloud.example.com/accelerator: nvidia-a100}
spec:
  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
status:
  allocatable: {cpu: "4", memory: 16Gi, nvidia.com/gpu: "2", pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: node-cpu-1, labels: {kubernetes.io/hostname: node-cpu-1}}
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cluster-queue}
spec:
  namespaceSelector:
    matchExpressions: [{key: team, operator: In, values: [a, b]}]
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 8}
      - {name: memory, nominalQuota: 32Gi}
      - {name: nvidia.com/gpu, nominalQuota: 2}
    - name: gpu
      resources:
      - {name: cpu, nominalQuota: 8}
      - {name: memory, nominalQuota: 32Gi}
      - {name: nvidia.com/gpu, nominalQuota: 4}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: team-a, name: lq-team-a}
spec: {clusterQueue: cluster-queue}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: team-b, name: lq-team-b}
spec: {clusterQueue: cluster-queue}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
description: deadlines
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: low}
value: 100
description: everything else
"""

# name, team, priority class, arrives after (s), runs for (s), pods, requests per pod
_JOBS = (
    ("prep-data", "a", "low", 0, 40, 1, "{cpu: '4', memory: 8Gi}"),
    ("train-small", "b", "low", 3, 90, 1, "{cpu: '2', memory: 8Gi, nvidia.com/gpu: '2'}"),
    ("train-big", "a", "low", 6, 120, 2, "{cpu: '2', memory: 8Gi, nvidia.com/gpu: '2'}"),
    ("eval", "b", "low", 9, 30, 1, "{cpu: '2', memory: 4Gi}"),
    ("notebook-batch", "a", "low", 12, 20, 1, "{cpu: '2', memory: 4Gi}"),
    ("urgent-train", "b", "high", 15, 60, 1, "{cpu: '2', memory: 8Gi, nvidia.com/gpu: '2'}"),
    ("report", "a", "low", 20, 15, 1, "{cpu: '1', memory: 2Gi}"),
    ("sweep-1", "b", "low", 25, 45, 1, "{cpu: '2', memory: 4Gi, nvidia.com/gpu: '1'}"),
    ("sweep-2", "b", "low", 28, 45, 1, "{cpu: '2', memory: 4Gi, nvidia.com/gpu: '1'}"),
    ("finalize", "a", "high", 35, 10, 1, "{cpu: '2', memory: 4Gi}"),
)

_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  namespace: team-{team}
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: lq-team-{team}, kueue.x-k8s.io/priority-class: {priority}}}
  annotations: {{muster.dev/submit-after: "{after}", muster.dev/run-seconds: "{runs}"}}
spec:
  parallelism: {pods}
  completions: {pods}
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: registry.example.com/{name}:latest
        resources:
          requests: {requests}
"""

# A Kubernetes v1.37 gang outside Kueue (scheduling.k8s.io/v1beta1): a Workload with one gang
# template, the PodGroup made from it, and four workers that join it (spec.schedulingGroup)
# and start together or not at all (minCount 4), placed by muster (schedulerName: muster).
_GANG_NAME, _GANG_AFTER, _GANG_RUNS, _GANG_SIZE = "dist-train", 18, 30, 4
_GANG_WORKLOAD = f"""\
apiVersion: scheduling.k8s.io/v1beta1
kind: Workload
metadata:
  namespace: team-a
  name: {_GANG_NAME}
  annotations: {{muster.dev/submit-after: "{_GANG_AFTER}"}}
spec:
  podGroupTemplates:
  - name: workers
    schedulingPolicy: {{gang: {{minCount: {_GANG_SIZE}}}}}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata:
  namespace: team-a
  name: {_GANG_NAME}-workers
  annotations: {{muster.dev/submit-after: "{_GANG_AFTER}"}}
spec:
  workloadRef: {{workloadName: {_GANG_NAME}, templateName: workers}}
  schedulingPolicy: {{gang: {{minCount: {_GANG_SIZE}}}}}
"""
_GANG_POD = """\
apiVersion: v1
kind: Pod
metadata:
  namespace: team-a
  name: {workload}-worker-{i}
  annotations: {{muster.dev/submit-after: "{after}", muster.dev/run-seconds: "{runs}"}}
spec:
  schedulerName: muster
  schedulingGroup: {{podGroupName: {workload}-workers}}
  restartPolicy: Never
  containers:
  - name: main
    image: registry.example.com/{workload}:latest
    resources:
      requests: {{cpu: '1', memory: 2Gi}}
"""

DEMO_YAML = "---\n".join(
    [
        _CONFIG,
        *(
            _JOB.format(
                name=name,
                team=team,
                priority=priority,
                after=after,
                runs=runs,
                pods=pods,
                requests=requests,
            )
            for name, team, priority, after, runs, pods, requests in _JOBS
        ),
        _GANG_WORKLOAD,
        *(
            _GANG_POD.format(workload=_GANG_NAME, i=i, after=_GANG_AFTER, runs=_GANG_RUNS)
            for i in range(_GANG_SIZE)
        ),
    ]
)
