"""A gateway's `submitted` on its name's subject (docs/events.md, "One-write claims"): the
subject, the fence's filter, the readers' filters of both shapes, and what a reader accepts as
stored there."""

from __future__ import annotations

import pytest

from muster.admission.subjects import consumer_subjects, replay_subjects
from muster.bus import Reject, encode, new_event
from muster.bus.envelope import decode_stored
from muster.bus.subjects import name_filter, name_key, named_subject, workload_filters
from muster.contracts.v1 import events_pb2


def submitted(workload: str, *, cluster: str = "east", partition: str = "3") -> events_pb2.Envelope:
    env = new_event(
        "submitted", events_pb2.WorkloadSubmitted(), cluster=cluster, workload=workload, source="t"
    )
    env.partition = partition
    return env


def test_the_name_follows_the_partition_and_the_fence_spans_clusters_and_partitions() -> None:
    env = submitted("ml/train.v2")
    assert named_subject(env) == "muster.v1.east.workload.submitted.3.ml.train.v2"
    assert name_filter("ml/train.v2") == "muster.v1.*.workload.submitted.*.ml.train.v2"


def test_a_name_that_is_no_key_is_hashed_under_a_token_no_namespace_has() -> None:
    key = name_key("ml/a..b")
    assert key.startswith("=sha256.")
    assert key != name_key("ml/a...b")
    assert named_subject(submitted("ml/a..b")).endswith(f".3.{key}")


def test_only_a_submitted_with_a_partition_has_a_name_subject() -> None:
    with pytest.raises(ValueError, match="has no name subject"):
        named_subject(submitted("ml/x", partition=""))
    deleted = new_event(
        "deleted", events_pb2.WorkloadDeleted(), cluster="east", workload="ml/x", source="t"
    )
    deleted.partition = "3"
    with pytest.raises(ValueError, match="has no name subject"):
        named_subject(deleted)


def test_readers_of_submitted_read_both_shapes_and_other_events_one() -> None:
    assert workload_filters("*", "submitted", "3") == (
        "muster.v1.*.workload.submitted",
        "muster.v1.*.workload.submitted.3",
        "muster.v1.*.workload.submitted.3.>",
    )
    assert workload_filters("*", "deleted") == (
        "muster.v1.*.workload.deleted",
        "muster.v1.*.workload.deleted.*",
    )
    for filters in (consumer_subjects({1, 5}), replay_subjects({1, 5})):
        assert {"muster.v1.*.workload.submitted.1.>", "muster.v1.*.workload.submitted.5.>"} <= set(
            filters
        )
        assert not [
            f for f in filters if f.endswith(".>") and ".workload." in f and ".submitted." not in f
        ]
    assert "muster.v1.*.workload.submitted.*.>" in consumer_subjects(range(16))


def test_a_reader_takes_a_submitted_on_its_own_name_and_refuses_another_name() -> None:
    env = submitted("ml/train")
    data = encode(env)
    assert decode_stored(data, subject=named_subject(env)).workload == "ml/train"
    for subject in (
        "muster.v1.east.workload.submitted.3.ml.other",  # another name's fence
        "muster.v1.east.workload.submitted.4.ml.train",  # another partition
        "muster.v1.west.workload.submitted.3.ml.train",  # another cluster
    ):
        with pytest.raises(Reject, match="not on its own subject"):
            decode_stored(data, subject=subject)
    deleted = new_event(
        "deleted", events_pb2.WorkloadDeleted(), cluster="east", workload="ml/train", source="t"
    )
    deleted.partition = "3"
    with pytest.raises(Reject, match="not on its own subject"):
        decode_stored(encode(deleted), subject="muster.v1.east.workload.deleted.3.ml.train")
