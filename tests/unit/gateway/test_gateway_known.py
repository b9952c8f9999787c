"""The gateway's duplicate rule is admission's: for any history of submissions, finishes and
deletions, Submit says "already exists" exactly when admission's ledger would ignore the
`submitted` (gateway/known.py; admission/ledger.py is the authority)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from muster.admission import ledger as admission_ledger
from muster.admission.fact_reader import fact_of
from muster.admission.facts import Submit
from muster.admission.ledger import Ledger
from muster.api.model import WorkloadKey
from muster.bus import new_event
from muster.contracts.v1 import events_pb2 as pb
from muster.gateway import known as gateway_known
from muster.gateway.known import KnownWorkloads

KEYS = ("ns/a", "ns/b", "ns/c")
Step = tuple[str, str]  # (what, key)
steps = st.lists(st.tuples(st.sampled_from(["submit", "finish", "delete"]), st.sampled_from(KEYS)))


def submitted(key: str) -> pb.Envelope:
    namespace, name = key.split("/")
    container = {"name": "c", "resources": {"requests": {"cpu": "1"}}}
    pod_set = {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
    manifest = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"queueName": "lq", "podSets": [pod_set]},
    }
    payload = pb.WorkloadSubmitted(manifest_json=json.dumps(manifest))
    return new_event("submitted", payload, cluster="local", workload=key, source="test")


def ended(what: str, key: str) -> pb.Envelope:
    payload = pb.WorkloadFinished() if what == "finish" else pb.WorkloadDeleted()
    field = "finished" if what == "finish" else "deleted"
    return new_event(field, payload, cluster="local", workload=key, source="test")


@settings(max_examples=300, deadline=None)
@given(steps)
def test_submit_says_exists_exactly_when_admission_ignores_the_submission(
    history: list[Step],
) -> None:
    ledger, known = Ledger(finished_kept=2), KnownWorkloads(finished_kept=2)
    for sequence, (what, key) in enumerate(history, start=1):
        env = submitted(key) if what == "submit" else ended(what, key)
        env.sequence = sequence
        if what == "submit":
            fact = fact_of(env)
            assert isinstance(fact, Submit)
            duplicate = known.duplicate(key, env.event_id)
            taken = ledger.submit(fact.workload, cluster="local", generation=1, at_s=0.0)
            assert duplicate == (taken is None), (what, key)
            if not duplicate:  # the gateway published it: known before it is read back
                known.published(key, env.event_id)
        elif what == "finish":
            ledger.finish(WorkloadKey(key))
        else:
            ledger.delete(WorkloadKey(key))
        known.apply(env)


def test_both_remember_as_many_finished_workloads() -> None:
    assert gateway_known.FINISHED_KEPT == admission_ledger.FINISHED_KEPT


def test_a_submit_retried_with_its_idempotency_key_is_the_same_submission() -> None:
    known = KnownWorkloads()
    first = submitted("ns/a")
    first.sequence = 1
    known.apply(first)
    assert not known.duplicate("ns/a", first.event_id)  # JetStream drops the copy
    assert known.duplicate("ns/a", "another-id")


def test_an_event_read_twice_changes_nothing() -> None:
    known = KnownWorkloads()
    first, gone = submitted("ns/a"), ended("delete", "ns/a")
    first.sequence, gone.sequence = 1, 2
    for env in (first, gone, first):  # the follower and a catch-up read overlap
        known.apply(env)
    assert not known.duplicate("ns/a", "another-id")


def test_a_second_call_right_after_the_first_finds_the_name_known() -> None:
    known = KnownWorkloads()
    first = submitted("ns/a")
    known.published("ns/a", first.event_id)  # stored, not read back yet
    assert known.duplicate("ns/a", "another-id")
    assert not known.duplicate("ns/a", first.event_id)

    first.sequence = 1
    known.apply(first)
    assert known.sent == {}
    gone = ended("delete", "ns/a")
    gone.sequence = 2
    known.apply(gone)
    assert not known.duplicate("ns/a", "another-id")


def test_own_submissions_not_read_back_stay_bounded() -> None:
    known = KnownWorkloads(sent_kept=2)
    for name in ("a", "b", "c"):
        known.published(f"ns/{name}", f"id-{name}")
    assert list(known.sent) == ["ns/b", "ns/c"]  # the oldest left to admission's rule
    assert not known.duplicate("ns/a", "another-id")
    assert known.duplicate("ns/c", "another-id")


@settings(max_examples=200, deadline=None)
@given(steps)
def test_a_name_is_claimed_anew_for_each_life_and_alike_by_every_gateway(
    history: list[Step],
) -> None:
    """Two indexes that read the same events claim each name alike; a name's claim changes
    exactly when it is deleted (a new life), so racing submissions of one life share it."""
    one, other = KnownWorkloads(), KnownWorkloads()
    for sequence, (what, key) in enumerate(history, start=1):
        env = submitted(key) if what == "submit" else ended(what, key)
        env.sequence = sequence
        before = one.claim("local", key)
        one.apply(env)
        other.apply(env)
        assert one.claim("local", key) == other.claim("local", key)
        assert (one.claim("local", key) != before) == (what == "delete")


def at(env: pb.Envelope, sequence: int) -> pb.Envelope:
    env.sequence = sequence
    return env


def test_a_names_next_submitted_is_fenced_at_its_last_lifes_once_deleted() -> None:
    known = KnownWorkloads(finished_kept=1)
    assert known.fence("ns/a") == 0  # never stored
    known.apply(at(submitted("ns/a"), 5))
    assert known.fence("ns/a") == 0  # held: a Submit is refused by the fence, then `exists`
    known.apply(at(ended("delete", "ns/a"), 9))
    assert known.fence("ns/a") == 5
    known.apply(at(submitted("ns/a"), 12))
    known.apply(at(ended("finish", "ns/a"), 13))
    known.apply(at(ended("delete", "ns/a"), 14))
    assert known.fence("ns/a") == 12
    # A finished one forgotten (past `finished_kept`) is forgotten here too: memory bounded.
    known.apply(at(submitted("ns/b"), 20))
    known.apply(at(ended("finish", "ns/b"), 21))
    known.apply(at(submitted("ns/c"), 22))
    known.apply(at(ended("finish", "ns/c"), 23))
    assert "ns/b" not in known.held_at
    assert known.fence("ns/b") == 0  # a wrong guess only costs a refused write
