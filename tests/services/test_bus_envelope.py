"""Subjects and the envelope codec, without NATS."""

from __future__ import annotations

import uuid

import pytest
from bus_helpers import pending, submitted

from muster.bus import Reject, decode, encode, new_event, subject_of
from muster.bus.envelope import EVENT_ID_NAMESPACE
from muster.bus.subjects import (
    EVENT_TYPES,
    command_subject,
    config_subject,
    dlq_subject,
    queue_subject,
    stream_of,
    workload_subject,
)
from muster.contracts.v1 import events_pb2

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("field", "event_type"),
    [
        ("admitted", "workload.admitted"),
        ("quota_reserved", "workload.quota_reserved"),
        ("bound", "workload.bound"),
        ("queue_status", "queue.status"),
        ("config_applied", "config.applied"),
        ("config_deleted", "config.deleted"),
        ("evict_requested", "cmd.evict"),
    ],
)
def test_event_type_is_derived_from_the_payload_field(field: str, event_type: str) -> None:
    assert EVENT_TYPES[field] == event_type


def test_every_payload_field_has_its_own_event_type() -> None:
    oneof = events_pb2.Envelope.DESCRIPTOR.oneofs_by_name["payload"]
    assert set(EVENT_TYPES) == {f.name for f in oneof.fields}
    assert len(set(EVENT_TYPES.values())) == len(EVENT_TYPES)


def test_subjects_follow_the_scheme() -> None:
    assert workload_subject("east-1", "admitted") == "muster.v1.east-1.workload.admitted"
    assert workload_subject("*", ">") == "muster.v1.*.workload.>"
    assert command_subject("east-1", "evict") == "muster.v1.east-1.cmd.evict"
    assert queue_subject("local") == "muster.v1.local.queue.status"
    assert config_subject("local", "applied") == "muster.v1.local.config.applied"
    assert dlq_subject("binder") == "muster.v1.dlq.binder"
    env = new_event("evict_requested", events_pb2.EvictRequested(), cluster="c2", source="t")
    assert subject_of(env) == "muster.v1.c2.cmd.evict"
    assert stream_of(env.type) == "MUSTER_COMMANDS"
    assert stream_of("workload.admitted") == "MUSTER_EVENTS"


@pytest.mark.parametrize("cluster", ["", "a.b", "a b", "a*", ">", "dlq"])
def test_invalid_cluster_ids_are_refused(cluster: str) -> None:
    with pytest.raises(ValueError, match="cluster id"):
        workload_subject(cluster, "admitted")


def test_caused_event_ids_are_deterministic_and_distinct_per_n() -> None:
    cause = submitted("ns/a")
    first = pending("ns/a", "x", cause=cause)
    again = pending("ns/a", "y", cause=cause)
    other = pending("ns/a", "x", cause=cause, n=1)
    assert first.event_id == again.event_id != other.event_id
    expected = uuid.uuid5(EVENT_ID_NAMESPACE, f"{cause.event_id}/workload.pending/ns/a/0")
    assert first.event_id == str(expected)
    assert first.cause == cause.event_id


def test_uncaused_event_ids_are_random() -> None:
    assert submitted("ns/a").event_id != submitted("ns/a").event_id


def test_event_time_comes_from_now_ns_when_given() -> None:
    assert submitted("ns/a", now_ns=42).time_unix_nano == 42


def test_payload_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(TypeError, match="admitted"):
        new_event("admitted", events_pb2.WorkloadPending(), cluster="local", source="t")
    with pytest.raises(ValueError, match="no payload field"):
        new_event("nope", events_pb2.WorkloadPending(), cluster="local", source="t")


def test_decode_round_trips() -> None:
    env = submitted("ns/a", manifest='{"kind": "Workload"}')
    assert decode(encode(env), max_bytes=10_000) == env


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff\xff\xff", "undecodable"),
        (events_pb2.Envelope(event_id="e", type="workload.pending").SerializeToString(), "payload"),
        (b"x" * 101, "over the limit of 100"),
    ],
)
def test_decode_rejects_bad_data_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(Reject, match=reason):
        decode(data, max_bytes=100)


def test_decode_rejects_a_type_that_does_not_match_the_payload() -> None:
    env = pending("ns/a", "m")
    env.type = "workload.admitted"
    with pytest.raises(Reject, match="carries 'pending'"):
        decode(encode(env))
