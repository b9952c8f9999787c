"""The admission service: Kueue's admission engine for a shard of cohort trees, over NATS.

`state` keeps the engine and an index of every live workload (rebuilt from `MUSTER_EVENTS`),
`fact_reader` turns envelopes into engine facts (`facts`) and `decisions` engine events into
envelopes, `service` wires the lease, the rebuild, the consumer, the timer and the visibility
writer.
"""
