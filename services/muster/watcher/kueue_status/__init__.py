"""Kueue-shaped statuses of one cluster's Workloads, ClusterQueues and LocalQueues, folded from
muster's events: what `kubectl get workloads`, `kubectl describe workload` and `kubectl get
clusterqueue,localqueue` show. Pure (no I/O, no clock); the watcher's status task (`status`)
feeds it events and desires what changed.

- Workload: conditions QuotaReserved, Admitted, Evicted, Requeued, Finished (reason and
  message as Kueue words them), `admission` (ClusterQueue, podSetAssignments) and, under
  MultiKueue, `clusterName` (the worker that admitted it, unset by any eviction), from
  `pending`, `quota_reserved`, `admitted`, `evicted`, `eviction_completed`, `requeued`,
  `finished` and `active_changed`: through an eviction as Kueue's workload controller and job
  reconciler write them (Evicted at once; the reservation cleared and Requeued set once the
  pods are gone; BackoffFinished, <Queue>Restarted or Reactivated when it queues again); with
  waitForPodsReady on, PodsReady as Kueue's job reconciler keeps it (False, WaitForStart, from
  the start and whenever it is not admitted; True, Started, once a `running` with its pods
  ready or a `pods_ready` says so while admitted); of a Job's Workload, `reclaimablePods` as
  Kueue's job reconciler keeps it (the Job's finished pods: `submitted`'s manifest, then each
  `reclaimable_pods`, until it finishes); and what its
  check list should hold (`checks_of`: the checks its reservation requires, its last
  eviction), which the writer merges into the stored list (`muster.api.check_states`).
- ClusterQueue: admission's own `queue.status` (counts, flavorsReservation, flavorsUsage,
  Active).
- LocalQueue: counts and flavor sums over its workloads (a workload evicted but not yet
  requeued still reserves quota), Active while its ClusterQueue exists in the cluster; with
  Kueue's `admissionFairSharing` configured, `fairSharing.admissionFairSharingStatus`
  (`consumedResources` as of `lastUpdate`: `core.admission_fair_sharing`, as admission orders
  by it), re-sampled every `usageSamplingInterval` as Kueue's LocalQueue controller does
  (`sample`), and as of the last event that started, resized or ended one of its workloads'
  runs. A run holds the workload's admission less its reclaimable pods (`core.reclaim`, with
  Kueue's gate ReclaimablePods on), from the event that told them, as admission's run does.

Modules, each importing only those after it (the `kueue statuses are layered` contract):
`book` (`StatusBook`: the events in, the statuses out), `queues` (`QueueBook`: ClusterQueues,
LocalQueues, fair sharing usage), `transitions` (a Workload's conditions and requeueState on
each event) and `cluster_queue` (a ClusterQueue's status), `workload` (`WorkloadRecord`), then
`fields` (quantities, conditions, flavor lists) and `followed` (the events followed).
"""
