"""What a binder keeps in MUSTER_MANIFESTS_<c>, from the events it follows (binder/manifests.py)."""

from __future__ import annotations

from muster.binder.handlers import WorkloadSpecs
from muster.binder.manifests import ManifestChanges
from muster.bus import new_event
from muster.contracts.v1 import events_pb2
from muster.payloads import MANIFEST_COPY_LIMIT

BIG = "x" * (MANIFEST_COPY_LIMIT + 1)


def submitted(key: str, manifest: str = BIG, *, owner: str = "") -> events_pb2.Envelope:
    payload = events_pb2.WorkloadSubmitted(manifest_json=manifest, owner_manifest_json=owner)
    env = new_event("submitted", payload, cluster="local", workload=key, source="test")
    env.sequence = 7
    return env


def ended(key: str, kind: str = "finished") -> events_pb2.Envelope:
    payload = events_pb2.WorkloadFinished() if kind == "finished" else events_pb2.WorkloadDeleted()
    return new_event(kind, payload, cluster="local", workload=key, source="test")


def test_keeps_a_manifest_or_an_owner_too_large_to_copy_and_nothing_else() -> None:
    changes = ManifestChanges()
    big, owned = submitted("ns/big"), submitted("ns/owned", "{}", owner=BIG)
    changes.submitted(submitted("ns/small", "x" * MANIFEST_COPY_LIMIT))
    changes.submitted(big)
    changes.submitted(owned)
    taken = changes.take()
    assert [k for k, _ in taken] == ["ns/big", "ns/owned"]
    (_, kept), _ = taken
    assert kept is not None
    assert kept.event_id == big.event_id
    assert kept.sequence == 0  # where it was read from is not what it says
    assert changes.take() == []


def test_an_end_removes_what_was_written_and_nothing_never_written() -> None:
    changes = ManifestChanges()
    changes.submitted(submitted("ns/a"))
    changes.take()  # written
    changes.ended("ns/a")
    changes.submitted(submitted("ns/b"))
    changes.ended("ns/b")  # submitted and ended between two takes: never written
    changes.ended("ns/c")  # never kept at all
    assert changes.take() == [("ns/a", None)]


def test_an_object_listed_at_start_is_removed_at_its_end_seen_in_the_replay() -> None:
    changes = ManifestChanges()
    changes.stored(["ns/old"])
    changes.ended("ns/old")
    assert changes.take() == [("ns/old", None)]


def test_a_name_submitted_again_small_removes_the_earlier_big_one() -> None:
    changes = ManifestChanges()
    changes.submitted(submitted("ns/a"))
    changes.take()
    changes.submitted(submitted("ns/a", "{}"))
    assert changes.take() == [("ns/a", None)]


def test_changes_not_made_are_made_at_the_next_take_unless_replaced() -> None:
    changes = ManifestChanges()
    first, second = submitted("ns/a"), submitted("ns/b")
    changes.submitted(first)
    changes.submitted(second)
    failed = changes.take()
    changes.ended("ns/b")  # after the failed write: its object may be there, so it is removed
    changes.put_back(failed)
    assert [(k, e is None) for k, e in changes.take()] == [("ns/b", True), ("ns/a", False)]


def test_the_binders_spec_view_asks_for_them_from_the_followed_events() -> None:
    specs = WorkloadSpecs()
    specs.apply(submitted("ns/a"))
    assert [k for k, _ in specs.manifests.take()] == ["ns/a"]
    done = ended("ns/a", "deleted")
    done.sequence = 8
    specs.apply(done)
    assert specs.manifests.take() == [("ns/a", None)]
