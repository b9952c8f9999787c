"""A gauge refresh exports exactly the snapshot it is given, and sets only what changed.

Admission refreshes every gauge of its trees with its views (up to ten times a second): a
refresh that set each of thousands of label sets again cost each replica the same whatever
changed (issue 19).
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Gauge

from muster.metrics.kueue_series import KueueSeries

PENDING = "kueue_pending_workloads"


def scrape(registry: CollectorRegistry) -> dict[tuple[str, ...], float]:
    return {
        (s.labels["cluster_queue"], s.labels["status"]): s.value
        for family in registry.collect()
        if family.name == PENDING
        for s in family.samples
    }


@pytest.fixture
def labelled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The label values each gauge child is looked up (and then set) with."""
    calls: list[tuple[str, ...]] = []
    labels = Gauge.labels

    def spy(self: Gauge, *values: str) -> Gauge:
        calls.append(values)
        return labels(self, *values)

    monkeypatch.setattr(Gauge, "labels", spy)
    return calls


def test_a_refresh_sets_only_the_values_that_changed(labelled: list[tuple[str, ...]]) -> None:
    registry = CollectorRegistry()
    series = KueueSeries(registry)
    queues: dict[tuple[str, ...], float] = {
        (f"cq-{q}", status): float(q) for q in range(200) for status in ("active", "x")
    }
    series.set_gauges({PENDING: queues})
    assert scrape(registry) == queues
    labelled.clear()
    series.set_gauges({PENDING: queues})
    assert labelled == []  # nothing changed: nothing set
    changed = {**queues, ("cq-7", "active"): 70.0}
    del changed[("cq-9", "x")]
    series.set_gauges({PENDING: changed})
    assert labelled == [("cq-7", "active", "leader")]
    assert scrape(registry) == changed  # the label set no longer there is gone
    series.set_gauges({PENDING: queues})  # back: the removed one is exported again
    assert scrape(registry) == queues
