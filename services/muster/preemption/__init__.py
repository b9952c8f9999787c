"""The preemption service: turns each `workload.evicted` into `cmd.evict` for the victim's
cluster, and re-sends it after a grace period until `workload.eviction_completed` arrives.

Stateless across restarts: the evictions in flight are rebuilt from `MUSTER_EVENTS`.
"""
