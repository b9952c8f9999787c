"""bench.round_counts: an admission replica's /metrics text read into rounds, facts, views."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from muster.bench.round_counts import RoundCounts, metrics_addresses, parse, per_replica
from muster.metrics.services import AdmissionSeries


def test_a_replicas_metrics_tell_its_rounds_their_facts_and_its_view_writes() -> None:
    registry = CollectorRegistry()
    series = AdmissionSeries(registry, shard=3, clock=lambda: 0.0)
    for facts in (4, 6, 0):
        series.decided(0.001, facts=facts, decisions=1)
    series.views_written()
    series.views_written()

    assert parse(generate_latest(registry).decode()) == RoundCounts(3, 10, 2)


def test_a_window_per_replica_of_two() -> None:
    spent = RoundCounts(rounds=40, events=100, views=6) - RoundCounts(rounds=20, events=20, views=2)

    counts = per_replica(spent, replicas=2, seconds=2.0)

    assert (counts.rounds_per_replica, counts.events_per_round, counts.views_per_s) == (
        10.0,
        4.0,
        1.0,
    )


def test_only_admission_replicas_serving_metrics_are_read() -> None:
    addresses = {
        "admission-0": {"health": "127.0.0.1:1", "metrics": "127.0.0.1:2"},
        "admission-1": {"health": "127.0.0.1:3"},
        "binder": {"metrics": "127.0.0.1:4"},
    }

    assert metrics_addresses(addresses) == ["127.0.0.1:2"]
