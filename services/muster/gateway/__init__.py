"""muster.gateway: the gRPC API (Gateway.Submit, Visibility, Events.Watch, health).

Stateless: Submit publishes `config.applied` and `workload.submitted`, Visibility reads the
MUSTER_VISIBILITY bucket that admission writes, Watch replays and follows MUSTER_EVENTS.
Run it with `muster service gateway` (see `__main__`).
"""
