"""What `muster bench chaos` submits: 4 ClusterQueues in 2 cohorts over 8 nodes, and workloads
that ask for more than the quota, at three priorities, so that they queue, borrow and preempt.

Every ClusterQueue has 8 cpu of nominal quota in flavor `default` (its cohort: 16; the nodes: 32
cpu, as much as all the quota), preempts lower priorities in itself and reclaims what its cohort
borrowed. A workload is 1 to 3 pods of 1 cpu for 10 to 40 virtual seconds, in a random queue;
a tenth are high priority, three tenths mid. Seeded: the same seed gives the same workloads.

With `gangs`, some submissions are gangs outside Kueue instead: a scheduler-plugins PodGroup and
its 2 to 4 pods of 1 cpu (all or none bound), above every Kueue priority, so that gang-permit
preempts admitted workloads to place them (`placement_preempted`, admission evicting them).
They hold no quota, only nodes: the nodes' over-commit and the run-once checks cover them.

`Shapes` adds what the plain run never exercised:
- `checks`: ClusterQueues a1 and b2 require AdmissionCheck `prov`, whose answers the run itself
  gives (`chaos_answers`), so admitted workloads wait for a check and some are sent back (Retry).
- `routing`: ClusterQueues route with `fastest`, and half the workloads may also run in the
  other ClusterQueue of their cohort (`muster.dev/alternatives`), so admission moves them.
  With `across`, any other ClusterQueue, of the other cohort too (with 2 shards, another
  shard's: admission forwards the workload).
- `big_pods`: that many workloads are 16 to 40 pods of 250m (4 to 10 cpu), and the bus's event
  limit is lowered (`BIG_PODS_EVENT_BYTES`) so that their permits and evictions go in parts.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Final

import msgspec

from muster.bench.sim_nodes import node_manifests

NAMESPACE: Final = "chaos"
COHORTS: Final = {"alpha": ("a1", "a2"), "beta": ("b1", "b2")}
NOMINAL_CPU: Final = 8
NODES: Final = 8
NODE_CPU: Final = 4
PRIORITIES: Final = ((100, 0.1), (50, 0.3), (10, 0.6))  # (priority, share), high first
# Above every Kueue workload's, and all alike: gangs preempt admitted workloads, never each
# other (a gang's pods deleted as a victim are not made again: nothing would finish it).
GANG_PRIORITY: Final = 1000
CHECK: Final = "prov"
CHECKED_QUEUES: Final = frozenset({"a1", "b2"})  # one per cohort: checked beside unchecked
BIG_PODS: Final = (16, 40)
BIG_POD_CPU_MILLI: Final = 250
# With 4 KiB of each part kept for the envelope (muster.gangpermit.parts), about 1 KiB of
# bindings per part: a big workload's permit and eviction come in 2 to 5 parts.
BIG_PODS_EVENT_BYTES: Final = 5120


class Shapes(msgspec.Struct, frozen=True, kw_only=True):
    """What a run adds to the plain scenario (module docstring)."""

    checks: bool = False
    routing: bool = False
    across: bool = False  # routing: alternatives in the other cohort too
    big_pods: int = 0

    @property
    def label(self) -> str:
        parts = [
            *(["checks"] if self.checks else []),
            *([f"routing{' across' if self.across else ''}"] if self.routing else []),
            *([f"big-pods {self.big_pods}"] if self.big_pods else []),
        ]
        return ", ".join(parts) or "plain"


PLAIN: Final = Shapes()


class ChaosWorkload(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    cluster_queue: str
    pods: int
    priority: int
    run_s: int  # virtual seconds
    cpu_milli: int = 1000  # per pod
    alternative: str = ""  # another ClusterQueue it may run in (routing), "" for none

    @property
    def key(self) -> str:
        return f"{NAMESPACE}/{self.name}"

    def manifest(self) -> str:
        alternatives = (
            f"\n    muster.dev/alternatives: '[{{queueName: lq-{self.alternative}}}]'"
            if self.alternative
            else ""
        )
        return _WORKLOAD.format(
            name=self.name,
            namespace=NAMESPACE,
            queue=f"lq-{self.cluster_queue}",
            run_s=self.run_s,
            pods=self.pods,
            priority=self.priority,
            cpu=f"{self.cpu_milli}m",
            alternatives=alternatives,
        )


class ChaosGang(msgspec.Struct, frozen=True, kw_only=True):
    """A gang outside Kueue: a scheduler-plugins PodGroup of `pods` pods, all or none."""

    name: str
    pods: int
    run_s: int  # virtual seconds

    cluster_queue: str = ""  # none: it holds no quota
    priority: int = GANG_PRIORITY

    @property
    def key(self) -> str:
        return f"{NAMESPACE}/{self.name}"

    def manifest(self) -> str:
        pods = [
            _GANG_POD.format(
                name=f"{self.name}-{i}",
                group=self.name,
                namespace=NAMESPACE,
                run_s=self.run_s,
                priority=self.priority,
            )
            for i in range(self.pods)
        ]
        group = _POD_GROUP.format(name=self.name, namespace=NAMESPACE, pods=self.pods)
        return "\n---\n".join([group, *pods])


def cohort_of() -> dict[str, str]:
    """ClusterQueue -> its cohort."""
    return {cq: cohort for cohort, cqs in COHORTS.items() for cq in cqs}


def cohort_quota_milli() -> dict[str, int]:
    """Cohort -> the cpu its ClusterQueues hold together, in millicores."""
    return {cohort: len(cqs) * NOMINAL_CPU * 1000 for cohort, cqs in COHORTS.items()}


def workloads(count: int, *, seed: int) -> list[ChaosWorkload]:
    rng = random.Random(seed)
    queues = sorted(cohort_of())
    out = []
    for i in range(count):
        draw, priority = rng.random(), PRIORITIES[-1][0]
        for value, share in PRIORITIES:
            if draw < share:
                priority = value
                break
            draw -= share
        out.append(
            ChaosWorkload(
                name=f"w-{i:05d}",
                cluster_queue=rng.choice(queues),
                pods=rng.randint(1, 3),
                priority=priority,
                run_s=rng.randint(10, 40),
            )
        )
    return out


def shaped(plain: list[ChaosWorkload], shapes: Shapes, *, seed: int) -> list[ChaosWorkload]:
    """`plain` with `shapes` applied (each seeded apart, so a shape leaves the others' draws
    alone): every other workload may also run in its cohort's other ClusterQueue, and
    `big_pods` of them, spread evenly, are big."""
    out = list(plain)
    if shapes.routing:
        rng = random.Random(f"routing-{seed}")
        for i, wl in enumerate(out):
            if rng.random() < 0.5:
                cohort = COHORTS[cohort_of()[wl.cluster_queue]]
                others = sorted(set(cohort_of() if shapes.across else cohort) - {wl.cluster_queue})
                out[i] = msgspec.structs.replace(wl, alternative=rng.choice(others))
    big = max(0, min(shapes.big_pods, len(out)))
    rng = random.Random(f"big-{seed}")
    for b in range(big):
        i = b * len(out) // big
        out[i] = msgspec.structs.replace(
            out[i], pods=rng.randint(*BIG_PODS), cpu_milli=BIG_POD_CPU_MILLI
        )
    return out


def mixed(
    count: int, *, gangs: int, seed: int, shapes: Shapes = PLAIN
) -> list[ChaosWorkload | ChaosGang]:
    """`count` submissions: `workloads(count - gangs)` (`shaped`) with `gangs` gangs spread
    evenly among them (seeded apart, so the workloads are those of the same seed without
    gangs)."""
    gangs = max(0, min(gangs, count))
    plain = workloads(count - gangs, seed=seed)
    out: list[ChaosWorkload | ChaosGang] = list(shaped(plain, shapes, seed=seed))
    rng = random.Random(f"gangs-{seed}")
    for g in range(gangs):
        gang = ChaosGang(name=f"g-{g:05d}", pods=rng.randint(2, 4), run_s=rng.randint(10, 40))
        out.insert((g + 1) * count // (gangs + 1), gang)
    return out


def config_yaml(shapes: Shapes = PLAIN) -> str:
    """Flavor, ClusterQueues and LocalQueues (and the AdmissionCheck), as one manifest for
    Gateway.Submit."""
    docs = ["apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: default}"]
    if shapes.checks:
        docs.append(_CHECK.format(name=CHECK))
    for cq, cohort in sorted(cohort_of().items()):
        checked = shapes.checks and cq in CHECKED_QUEUES
        docs.append(
            _QUEUE.format(
                cq=cq,
                cohort=cohort,
                cpu=NOMINAL_CPU,
                namespace=NAMESPACE,
                annotations="{muster.dev/routing-policy: fastest}" if shapes.routing else "{}",
                checks=f"[{CHECK}]" if checked else "[]",
            )
        )
    return "\n---\n".join(docs)


def checked_queues(shapes: Shapes) -> frozenset[str]:
    """The ClusterQueues whose reservations wait for check `CHECK`."""
    return CHECKED_QUEUES if shapes.checks else frozenset()


def nodes() -> list[dict[str, object]]:
    return node_manifests(NODES, cpu=NODE_CPU, memory="64Gi", pods=110)


def queues_of(submitted: Mapping[str, ChaosWorkload]) -> dict[str, str]:
    """Workload key -> its ClusterQueue."""
    return {key: wl.cluster_queue for key, wl in submitted.items()}


_CHECK = """apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {{name: {name}}}
spec: {{controllerName: chaos.muster.dev/answered-by-the-run}}"""

_QUEUE = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {cq}, annotations: {annotations}}}
spec:
  cohort: {cohort}
  admissionChecks: {checks}
  namespaceSelector: {{}}
  preemption: {{withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{{name: cpu, nominalQuota: {cpu}}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: {namespace}, name: lq-{cq}}}
spec: {{clusterQueue: {cq}}}"""

_WORKLOAD = """apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  namespace: {namespace}
  name: {name}
  annotations:
    muster.dev/run-seconds: "{run_s}"{alternatives}
spec:
  queueName: {queue}
  priority: {priority}
  podSets:
  - name: main
    count: {pods}
    template:
      spec:
        containers: [{{name: c, resources: {{requests: {{cpu: "{cpu}"}}}}}}]
"""

_POD_GROUP = """apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {{namespace: {namespace}, name: {name}}}
spec: {{minMember: {pods}}}"""

_GANG_POD = """apiVersion: v1
kind: Pod
metadata:
  namespace: {namespace}
  name: {name}
  labels: {{scheduling.x-k8s.io/pod-group: {group}}}
  annotations: {{muster.dev/run-seconds: "{run_s}"}}
spec:
  schedulerName: muster
  priority: {priority}
  restartPolicy: Never
  containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]"""
