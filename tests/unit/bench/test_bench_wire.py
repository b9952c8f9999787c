"""bench.wire: deliveries per consumer, labelled so that a table says who receives what."""

from __future__ import annotations

from datetime import UTC, datetime

from nats.js import api

from muster.bench.wire import WireCount, consumer_label, per_consumer


def info(
    *, durable_name: str | None = None, filter_subjects: list[str] | None = None
) -> api.ConsumerInfo:
    config = api.ConsumerConfig(durable_name=durable_name, filter_subjects=filter_subjects)
    return api.ConsumerInfo(
        name="x", stream_name="s", config=config, created=datetime(2026, 11, 26, tzinfo=UTC)
    )


def test_a_durable_is_named_an_ephemeral_by_its_filters_shortened() -> None:
    assert consumer_label("MUSTER_EVENTS", info(durable_name="binder-local")) == (
        "MUSTER_EVENTS binder-local"
    )
    followed = ["muster.v1.*.workload.submitted", "muster.v1.*.workload.submitted.*"]
    assert consumer_label("MUSTER_EVENTS", info(filter_subjects=followed)) == (
        "MUSTER_EVENTS [*.workload.submitted]"
    )
    pods = info(filter_subjects=["$KV.MUSTER_SIM_local.pod.>", "$KV.MUSTER_SIM_local.node.>"])
    assert consumer_label("KV_MUSTER_SIM_local", pods) == "KV_MUSTER_SIM_local [node.> pod.>]"
    assert consumer_label("KV_MUSTER_SIM_local", info()) == "KV_MUSTER_SIM_local [>]"


def test_deliveries_per_workload_per_consumer_between_two_readings() -> None:
    before = WireCount(stored={}, delivered={}, by_consumer={"a": 10, "b": 5, "gone": 3})
    after = WireCount(stored={}, delivered={}, by_consumer={"a": 30, "b": 5, "new": 4})
    # "b" moved nothing: left out; "gone" is not read again: not counted negative.
    assert per_consumer(before, after, 10) == {"a": 2.0, "new": 0.4, "total": 2.4}
