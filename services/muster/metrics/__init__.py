"""muster.metrics: Prometheus series of every service (docs/observability.md).

`bus`: the series every service has (events consumed and published, consumer lag, dead
letters, NATS reconnects), kept by the bus middleware; `server`: the `/metrics` endpoint;
`kueue_series`, `kueue_events`, `kueue_gauges`: Kueue's own series, as admission computes them
from its engine (pure mappings: events or state in, samples out); `services`: each service's
own `muster_*` series. Built on prometheus-client; nothing here talks to NATS.
"""
