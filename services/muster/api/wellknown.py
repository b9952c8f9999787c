"""Well-known label and annotation keys, and scheduler names, that tie objects together.

muster's own (`muster.dev/*`: which workload and podset a pod belongs to, how long it runs),
Kueue's podset topology annotations and scheduler-plugins' pod-group label. Decoding, gang
placement's sources, the binder and the simulated cluster all read them from here.
"""

from __future__ import annotations

WORKLOAD_LABEL = "muster.dev/workload"  # on a pod: the name of its workload (same namespace)
POD_SET_ANNOTATION = "muster.dev/pod-set"  # on a pod: its podset's name
# On a pod muster started: the W3C traceparent of its workload's trace, so that what the
# watcher reports about it joins that trace (docs/observability.md).
TRACEPARENT_ANNOTATION = "muster.dev/traceparent"
# The admission partition of a pod's workload (docs/events.md, "Partitions"), for the events
# the watcher publishes about its pods.
PARTITION_ANNOTATION = "muster.dev/partition"
RUN_SECONDS_ANNOTATION = "muster.dev/run-seconds"  # on a workload, Job or pod: run time
# On a workload, Job or pod: seconds from a pod's start until it is Ready, or "never"
# (simulated clusters: the kubelet; `muster simulate`: waitForPodsReady).
PODS_READY_AFTER_ANNOTATION = "muster.dev/pods-ready-after"
# On a workload, Job or pod: seconds after its pods are Ready that they stop being Ready
# (once), and seconds until they are Ready again, or "never" (the default): waitForPodsReady's
# recovery, on simulated clusters and in `muster simulate`.
PODS_UNREADY_AFTER_ANNOTATION = "muster.dev/pods-unready-after"
PODS_UNREADY_FOR_ANNOTATION = "muster.dev/pods-unready-for"
# What the simulated kubelet reads on a pod, copied there from its workload or Job.
POD_SCRIPT_ANNOTATIONS = (
    RUN_SECONDS_ANNOTATION,
    PODS_READY_AFTER_ANNOTATION,
    PODS_UNREADY_AFTER_ANNOTATION,
    PODS_UNREADY_FOR_ANNOTATION,
)
# On a workload or Job: other ways it may run, in order of preference (docs/routing.md).
ALTERNATIVES_ANNOTATION = "muster.dev/alternatives"
# On a ClusterQueue: how workloads declared in it are routed among their alternatives.
ROUTING_POLICY_ANNOTATION = "muster.dev/routing-policy"
ROUTING_POLICIES = ("static", "threshold", "fastest")  # core.routing.Policy, in this order

SCHEDULER_NAME = "muster"  # spec.schedulerName of the pods muster places
DEFAULT_SCHEDULER = "default-scheduler"  # Kubernetes' default for a pod that names none

# scheduler-plugins' coscheduling: a pod joins PodGroup <value> in its namespace.
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

# On a scheduling.k8s.io PodGroup or CompositePodGroup (v1.36+, which have no deadline): muster's
# shared gang deadline in seconds, turned on for this gang (docs/placement.md).
GANG_TIMEOUT_ANNOTATION = "muster.dev/gang-timeout-seconds"

# Kueue's topology annotations on a podset's pod template; the value is a node label key.
REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"

# Reasons muster writes on events, pod conditions and evictions; subscribers match on them
# (docs/events.md), so every service takes them from here.
PREEMPTED = "Preempted"  # Kueue's eviction reason; also a pod evicted by placement preemption
GANG_TIMED_OUT = "GangTimedOut"  # a gang not placed before its deadline
# The eviction (and Routed) reason of a routed workload whose requests the cluster refused.
REQUESTS_REFUSED = "RequestsRefused"
BIND_FAILED = "BindFailed"  # the binder could not bind a permitted gang
# A worker cluster refused to create the copy of a workload MultiKueue dispatched to it
# (gang_rejected from its binder): admission evicts it and passes that cluster over a while.
START_FAILED = "StartFailed"
ADMISSION_CHECK = "AdmissionCheck"  # Kueue's eviction reason when a check asks for a retry
PLACEMENT_PREEMPTED = "PlacementPreempted"  # an eviction asked for to place a gang
CLUSTER_LOST = "ClusterLost"  # the worker cluster a workload was dispatched to was lost

# MultiKueue (issue 6): Kueue's controller name for its multi-cluster admission check, and the
# annotations muster reads on its objects and, in scenarios, on cluster objects.
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
# The ProvisioningRequest admission check's controller (muster.checks.provisioning). Every
# `*_CONTROLLER` here is a check kind muster answers: tests/unit/checks/test_checks_registry.py
# fails for one without a controller in muster.checks.registry (or MultiKueue's dispatch).
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
KUEUE_GROUP = "kueue.x-k8s.io"
DISPATCH_ANNOTATION = "muster.dev/dispatch"  # on a MultiKueueConfig: first-fit or best-fit
CLUSTER_ANNOTATION = "muster.dev/cluster"  # in a scenario: the cluster of a Node, Pod, gang
LOCAL_CLUSTER = "local"  # the cluster id when none is given (as muster.bus.DEFAULT_CLUSTER)
