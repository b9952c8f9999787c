"""The preemption service delivers evictions; it chooses no victims. It turns each
`workload.evicted` into `cmd.evict` for the victim's cluster, and re-sends it after a grace
period until `workload.eviction_completed` arrives.

Victims are chosen where the quota is: Kueue's preemption in the admission engine
(`muster.core.preemption`, decided by the shard owning the cohort tree), and placement's in the
gang scheduler (`muster.core.placement.victims`, decided by gang-permit). Every eviction cause
(preemption, PodsReadyTimeout, an admission check's Retry, HoldAndDrain, a lost cluster) comes
through here the same way (docs/architecture.md, departure 2; docs/adr/0003).

Stateless across restarts: the evictions in flight are rebuilt from `MUSTER_EVENTS`.
"""
