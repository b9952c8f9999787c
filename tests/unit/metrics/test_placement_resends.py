"""`muster_placement_evictions_resent_total` follows gang-permit's count of evictions sent
again (task evictretry), told after each pass."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from muster.metrics.services import PlacementSeries


def test_the_resend_counter_follows_the_count_told_after_each_pass() -> None:
    registry = CollectorRegistry()
    series = PlacementSeries(registry, cluster="east")

    def resent() -> float | None:
        labels = {"cluster": "east"}
        return registry.get_sample_value("muster_placement_evictions_resent_total", labels)

    series.passed(0.001, waiting=0)
    assert resent() == 0
    series.passed(0.001, waiting=1, evictions_resent=2)
    series.passed(0.001, waiting=1, evictions_resent=2)  # no new re-send
    assert resent() == 2
    series.passed(0.001, waiting=0, evictions_resent=3)
    assert resent() == 3
