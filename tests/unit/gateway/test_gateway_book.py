"""The workload book, the stop/resume/delete plans and the event lines, from envelopes. Pure."""

from __future__ import annotations

import json

import pytest
from workload_manifest import workload_manifest

from muster.bus import new_event
from muster.cli.describe import render_description
from muster.contracts.v1 import events_pb2, services_pb2
from muster.gateway.book import Entry, WorkloadBook
from muster.gateway.clusters import _pods_by_node
from muster.gateway.control import DELETE, RESUME, STOP, kind_of, plan_queue, plan_workload
from muster.gateway.eventtext import detail, fold, line_of
from muster.gateway.permissions import Caller
from muster.gateway.visibility import InvalidQueryError
from muster.gateway.workloads import matching, one_named, summaries
from muster.payloads import PayloadError
from muster.watcher.translate import config_applied, config_deleted

ALICE = Caller(user="alice", groups=("team-a",))
_seq = iter(range(1, 10_000))


def env(field: str, payload: object, workload: str = "ml/job-train-1a2b3") -> events_pb2.Envelope:
    e = new_event(field, payload, cluster="local", workload=workload, source="t")  # type: ignore[arg-type]
    e.sequence = next(_seq)
    return e


def submitted(workload: str = "ml/job-train-1a2b3", job: str = "train") -> events_pb2.Envelope:
    owner = events_pb2.OwnerRef(kind="Job", name=job)
    manifest = workload_manifest(workload)
    payload = events_pb2.WorkloadSubmitted(queue_name="lq", owner=owner, manifest_json=manifest)
    return env("submitted", payload, workload)


def admission(cq: str = "cq") -> events_pb2.Admission:
    return events_pb2.Admission(cluster_queue=cq)


def book_of(*envs: events_pb2.Envelope) -> WorkloadBook:
    book = WorkloadBook()
    for e in envs:
        book.apply(e)
    return book


def test_a_workload_goes_pending_admitted_stopped_and_is_found_by_its_jobs_name() -> None:
    pods = [events_pb2.PodBinding(pod=events_pb2.PodRef(name="p0"), node="n1")]
    book = book_of(
        submitted(),
        env("pending", events_pb2.WorkloadPending(reason="WaitingForQuota", cluster_queue="cq")),
        env("quota_reserved", events_pb2.QuotaReserved(admission=admission())),
        env("admitted", events_pb2.WorkloadAdmitted(admission=admission())),
        env("bound", events_pb2.PodsBound(bindings=pods)),
    )
    (entry,) = book.find("ml", "train")
    assert (entry.summary.status, list(entry.summary.nodes)) == ("ADMITTED", ["n1"])
    assert book.find("ml", "job-train-1a2b3") == [entry]
    assert book.find("other", "train") == []

    book.apply(env("active_changed", events_pb2.WorkloadActiveChanged(active=False)))
    book.apply(env("evicted", events_pb2.WorkloadEvicted(reason="Deactivated")))
    book.apply(env("eviction_completed", events_pb2.EvictionCompleted()))
    assert (entry.summary.status, entry.summary.evictions) == ("INACTIVE", 1)
    assert entry.conditions["Evicted"].reason == "Deactivated"
    assert entry.describe().pods == []


@pytest.mark.parametrize("copies", [1, 2], ids=["reordered", "reordered-and-copied"])
def test_an_admission_stored_before_its_reservation_stays_admitted(copies: int) -> None:
    admitted = env("admitted", events_pb2.WorkloadAdmitted(admission=admission()))
    reserved = env("quota_reserved", events_pb2.QuotaReserved(admission=admission()))
    book = book_of(submitted(), *[admitted] * copies, reserved)
    (entry,) = book.find("ml", "train")
    assert (entry.summary.status, entry.summary.cluster_queue) == ("ADMITTED", "cq")
    assert {c.type: c.status for c in entry.conditions.values()} == {
        "Admitted": "True",
        "QuotaReserved": "True",
    }


def conditions_of(book: WorkloadBook) -> dict[str, tuple[str, str, str]]:
    (entry,) = book.find("ml", "train")
    return {c.type: (c.status, c.reason, c.message) for c in entry.conditions.values()}


def test_an_admission_with_its_reservation_reads_as_the_two_events_did() -> None:
    pending = env("pending", events_pb2.WorkloadPending(reason="WaitingForQuota"))
    reserved = env("quota_reserved", events_pb2.QuotaReserved(admission=admission()))
    admitted = events_pb2.WorkloadAdmitted(admission=admission())
    both = events_pb2.WorkloadAdmitted(admission=admission(), with_reservation=True)
    written_before = book_of(submitted(), pending, reserved, env("admitted", admitted))
    written_now = book_of(submitted(), pending, env("admitted", both))
    (before,), (now,) = written_before.find("ml", "train"), written_now.find("ml", "train")
    assert (now.summary.status, now.summary.cluster_queue) == ("ADMITTED", "cq")
    assert (now.summary.reason, now.summary.message) == ("", "")
    for entry in (now, before):  # their times are the events', which differ
        entry.summary.ClearField("submitted_unix_nano")
        entry.summary.ClearField("admitted_unix_nano")
    assert now.summary == before.summary
    assert conditions_of(written_now) == conditions_of(written_before)
    assert conditions_of(written_now)["QuotaReserved"] == (
        "True",
        "QuotaReserved",
        "Quota reserved in ClusterQueue cq",
    )
    # Evicted, its pods stopped, admitted again (elsewhere): reserved again, Evicted False.
    for book in (written_before, written_now):
        book.apply(env("evicted", events_pb2.WorkloadEvicted(reason="Preempted")))
        book.apply(env("eviction_completed", events_pb2.EvictionCompleted()))
        assert conditions_of(book)["QuotaReserved"][:2] == ("False", "PendingEvaluation")
    written_before.apply(env("quota_reserved", events_pb2.QuotaReserved(admission=admission("b"))))
    written_before.apply(env("admitted", events_pb2.WorkloadAdmitted(admission=admission("b"))))
    again = events_pb2.WorkloadAdmitted(admission=admission("b"), with_reservation=True)
    written_now.apply(env("admitted", again))
    assert conditions_of(written_now) == conditions_of(written_before)
    assert conditions_of(written_now)["Evicted"][:2] == ("False", "QuotaReserved")
    assert conditions_of(written_now)["QuotaReserved"][0] == "True"
    (now,) = written_now.find("ml", "train")
    assert (now.summary.status, now.summary.cluster_queue) == ("ADMITTED", "b")


def test_pods_running_and_ready_read_as_running_then_pods_ready_did() -> None:
    admitted = env("admitted", events_pb2.WorkloadAdmitted(admission=admission()))
    written_before = book_of(submitted(), admitted, env("running", events_pb2.WorkloadRunning()))
    assert "PodsReady" not in conditions_of(written_before)  # running, not yet ready
    written_before.apply(env("pods_ready", events_pb2.PodsReady()))
    now = events_pb2.WorkloadRunning(pods_ready=True)
    written_now = book_of(submitted(), admitted, env("running", now))
    assert conditions_of(written_now) == conditions_of(written_before)
    assert conditions_of(written_now)["PodsReady"] == (
        "True",
        "Started",
        "All pods reached readiness and the workload is running",
    )
    assert detail(env("running", now)) == "pods running and ready"


def test_readiness_lost_then_regained_reads_in_the_book_and_events() -> None:
    admitted = env("admitted", events_pb2.WorkloadAdmitted(admission=admission()))
    ready = env("running", events_pb2.WorkloadRunning(pods_ready=True))
    lost = env("pods_ready", events_pb2.PodsReady(lost=True))
    book = book_of(submitted(), admitted, ready, lost)
    assert conditions_of(book)["PodsReady"][:2] == ("False", "WaitForRecovery")
    assert detail(lost) == "a pod lost readiness"
    book.apply(env("pods_ready", events_pb2.PodsReady()))
    assert conditions_of(book)["PodsReady"][:2] == ("True", "Recovered")  # Kueue's words
    # Evicted, its pods start anew: admitted again and ready, it has Started, not Recovered.
    book.apply(env("evicted", events_pb2.WorkloadEvicted(reason="Preempted")))
    assert conditions_of(book)["PodsReady"][:2] == ("False", "WaitForStart")
    book.apply(env("eviction_completed", events_pb2.EvictionCompleted()))
    book.apply(admitted)
    book.apply(ready)
    assert conditions_of(book)["PodsReady"][:2] == ("True", "Started")


def test_the_back_off_limit_leaves_the_workload_inactive_once_its_pods_are_gone() -> None:
    limit = events_pb2.WorkloadEvicted(reason="DeactivatedDueToRequeuingLimitExceeded")
    book = book_of(
        submitted(),
        env("admitted", events_pb2.WorkloadAdmitted(admission=admission())),
        env("evicted", limit),
        env("eviction_completed", events_pb2.EvictionCompleted()),
    )
    (entry,) = book.find("ml", "train")
    assert entry.summary.status == "INACTIVE"


def test_a_pending_workload_stopped_says_deactivated_as_kueue_does() -> None:
    book = book_of(
        submitted(),
        env("pending", events_pb2.WorkloadPending(reason="WaitingForQuota", cluster_queue="cq")),
        env("active_changed", events_pb2.WorkloadActiveChanged(active=False)),
    )
    (entry,) = book.find("ml", "train")
    reserved = entry.conditions["QuotaReserved"]
    assert (entry.summary.status, reserved.status, reserved.reason) == (
        "INACTIVE",
        "False",
        "Deactivated",
    )
    assert reserved.message == "The workload is deactivated"


def test_a_gang_outside_kueue_is_found_by_its_source_name() -> None:
    key = "ml/allreduce/workers"
    waiting = events_pb2.GangWaiting(reason="3 of 4 pods pending", pending=3, min_count=4)
    book = book_of(env("gang_waiting", waiting, key), env("gang_waiting", waiting, key))
    (entry,) = book.find("ml", "allreduce")
    assert (entry.key, entry.summary.status, entry.kueue) == (key, "WAITING", False)
    assert [line.count for line in entry.lines] == [2]  # folded


def stopped_part(
    part: int, parts: int, pods: int, workload: str, *, gone: int = 0, command: str = "evict-1"
) -> events_pb2.Envelope:
    """The binder's answer to one part of gang-permit's `cmd.evict` of `workload`."""
    done = events_pb2.EvictionCompleted(
        pods=pods, part=part, parts=parts, command_id=command, gone=gone
    )
    return env("eviction_completed", done, workload)


def _created(*nodes: str) -> events_pb2.Envelope:
    """A whole permit to create one pod on each of `nodes` (docs/events.md, "Pods created on
    their nodes")."""
    bindings = [
        events_pb2.PodBinding(pod=events_pb2.PodRef(namespace="ml", name=f"p{i}"), node=n)
        for i, n in enumerate(nodes)
    ]
    return env("gang_permitted", events_pb2.GangPermitted(bindings=bindings, create=True))


def test_pods_created_on_their_nodes_with_no_bound_show_their_nodes_once_running() -> None:
    """A binder with `--bound-events binds` tells no `bound` for them: running, they were made
    where the permit put them (docs/events.md, "`bound` only for binds")."""
    book = book_of(
        submitted(),
        env("admitted", events_pb2.WorkloadAdmitted(admission=admission())),
        _created("n1", "n2"),
    )
    (entry,) = book.find("ml", "train")
    assert list(entry.summary.nodes) == []  # permitted, not made yet

    book.apply(env("running", events_pb2.WorkloadRunning(pods_ready=True)))

    assert list(entry.summary.nodes) == ["n1", "n2"]
    assert sorted(p.pod.name for p in entry.describe().pods) == ["p0", "p1"]


def test_a_victim_evicted_in_parts_keeps_its_pods_until_every_part_is_answered() -> None:
    key = "ml/allreduce"  # a PodGroup's gang: evicted under its own key
    pods = [
        events_pb2.PodBinding(pod=events_pb2.PodRef(name=f"w-{i}"), node="n1") for i in range(3)
    ]
    book = book_of(env("bound", events_pb2.PodsBound(bindings=pods), key))
    (entry,) = book.find("ml", "allreduce")

    book.apply(stopped_part(1, 2, pods=1, workload=key))  # answered first, as may happen
    assert (len(entry.describe().pods), list(entry.summary.nodes)) == (3, ["n1"])
    assert entry.lines[-1].detail == "1 pod stopped (part 2 of 2)"

    book.apply(stopped_part(0, 2, pods=2, workload=key))
    assert (list(entry.describe().pods), list(entry.summary.nodes)) == ([], [])


def test_a_copy_that_stopped_nothing_keeps_the_pods_bound_since() -> None:
    key = "ml/allreduce"
    old, new = (
        [events_pb2.PodBinding(pod=events_pb2.PodRef(name=f"w-{i}"), node=node) for i in range(2)]
        for node in ("n1", "n2")
    )
    book = book_of(env("bound", events_pb2.PodsBound(bindings=old), key))
    (entry,) = book.find("ml", "allreduce")
    book.apply(stopped_part(0, 0, pods=2, workload=key))
    assert list(entry.summary.nodes) == []

    book.apply(env("bound", events_pb2.PodsBound(bindings=new), key))  # placed again
    book.apply(stopped_part(0, 0, pods=2, workload=key, gone=2))  # a re-send's answer
    book.apply(stopped_part(0, 2, pods=1, workload=key, gone=1, command="evict-2"))
    book.apply(stopped_part(1, 2, pods=1, workload=key, gone=1, command="evict-2"))
    assert (len(entry.describe().pods), list(entry.summary.nodes)) == (2, ["n2"])
    assert entry.evict_parts == {}

    book.apply(stopped_part(0, 2, pods=1, workload=key, gone=1, command="evict-3"))
    book.apply(stopped_part(1, 2, pods=1, workload=key, command="evict-3"))  # stopped one
    assert (list(entry.describe().pods), list(entry.summary.nodes)) == ([], [])
    assert (entry.evict_parts, entry.evict_stopped) == ({}, set())


def test_a_placement_evictions_answer_is_not_the_end_of_a_kueue_eviction_of_that_name() -> None:
    pods = [events_pb2.PodBinding(pod=events_pb2.PodRef(name="p0"), node="n1")]
    book = book_of(
        submitted(),
        env("admitted", events_pb2.WorkloadAdmitted(admission=admission())),
        env("bound", events_pb2.PodsBound(bindings=pods)),
        env("evicted", events_pb2.WorkloadEvicted(reason="Preempted")),
        stopped_part(0, 0, pods=4, workload="ml/job-train-1a2b3"),
    )
    (entry,) = book.find("ml", "train")
    assert conditions_of(book)["QuotaReserved"][0] == "True"  # its own pods still stopping
    assert len(entry.describe().pods) == 1

    book.apply(env("eviction_completed", events_pb2.EvictionCompleted()))
    assert conditions_of(book)["QuotaReserved"][:2] == ("False", "PendingEvaluation")


def test_deleted_and_old_finished_workloads_are_forgotten() -> None:
    book = WorkloadBook(finished_kept=1)
    for name in ("a", "b"):
        book.apply(submitted(f"ml/{name}", job=name))
        book.apply(env("finished", events_pb2.WorkloadFinished(succeeded=True), f"ml/{name}"))
    assert [e.key for e in book] == ["ml/b"]
    book.apply(env("deleted", events_pb2.WorkloadDeleted(), "ml/b"))
    assert len(book) == 0


def test_plans_stop_resume_and_delete_a_workload_and_say_when_nothing_changes() -> None:
    book = book_of(submitted())
    (entry,) = book.find("ml", "train")

    stop = plan_workload(entry, STOP, ALICE, idempotency_key="k1")
    assert [e.type for e in stop.events] == ["workload.active_changed"]
    assert stop.events[0].active_changed.submitter.user == "alice"
    retried = plan_workload(entry, STOP, ALICE, idempotency_key="k1")
    assert retried.events[0].event_id == stop.events[0].event_id  # deduplicated by JetStream
    assert plan_workload(entry, RESUME, ALICE, idempotency_key="").events == ()
    deleted = plan_workload(entry, DELETE, ALICE, idempotency_key="")
    assert [e.type for e in deleted.events] == ["workload.active_changed", "workload.deleted"]

    book.apply(stop.events[0])
    assert plan_workload(entry, STOP, ALICE, idempotency_key="").message == "already stopped"
    assert [e.type for e in plan_workload(entry, RESUME, ALICE, idempotency_key="").events] == [
        "workload.active_changed"
    ]


def test_a_queue_stop_patches_its_last_manifest_and_resume_removes_the_policy() -> None:
    manifest = {"kind": "LocalQueue", "metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}}
    applied = ("east", json.dumps(manifest))

    plan = plan_queue("LocalQueue", "ml/lq", applied, policy="Hold", caller=ALICE, verb=STOP,
                      idempotency_key="")  # fmt: skip
    (event,) = plan.events
    assert (event.cluster, event.config_applied.kind, event.config_applied.name) == (
        "east",
        "LocalQueue",
        "ml/lq",
    )
    patched = json.loads(event.config_applied.manifest_json)
    assert patched["spec"] == {"clusterQueue": "cq", "stopPolicy": "Hold"}
    again = plan_queue("LocalQueue", "ml/lq", ("east", event.config_applied.manifest_json),
                       policy="Hold", caller=ALICE, verb=STOP, idempotency_key="")  # fmt: skip
    assert (again.events, again.message) == ((), "stopPolicy already Hold")
    resumed = plan_queue("LocalQueue", "ml/lq", ("east", event.config_applied.manifest_json),
                         policy="None", caller=ALICE, verb=RESUME, idempotency_key="")  # fmt: skip
    assert json.loads(resumed.events[0].config_applied.manifest_json)["spec"] == {
        "clusterQueue": "cq"
    }


def test_a_queue_stop_sends_the_one_encoding_a_config_applied_has() -> None:
    # As the watcher sends it for the same object: same bytes, whoever sends it.
    manifest = {"spec": {"clusterQueue": "cq"}, "metadata": {"name": "cq-lq"}, "kind": "LocalQueue",
                "apiVersion": "kueue.x-k8s.io/v1beta1"}  # fmt: skip
    plan = plan_queue("LocalQueue", "cq-lq", ("east", json.dumps(manifest)), policy="Hold",
                      caller=ALICE, verb=STOP, idempotency_key="")  # fmt: skip
    (event,) = plan.events
    held = {**manifest, "spec": {"clusterQueue": "cq", "stopPolicy": "Hold"}}
    assert event.config_applied.manifest_json == config_applied(held).payload.manifest_json


def test_a_queue_last_applied_as_no_object_is_an_error_naming_it() -> None:
    with pytest.raises(PayloadError, match=r"^LocalQueue/ml/lq: manifest is a JSON list"):
        plan_queue("LocalQueue", "ml/lq", ("east", "[]"), policy="Hold", caller=ALICE, verb=STOP,
                   idempotency_key="")  # fmt: skip


@pytest.mark.parametrize(
    ("typed", "kind"), [("wl", "Workload"), ("LocalQueue", "LocalQueue"), ("cq", "ClusterQueue")]
)
def test_kinds_take_kueuectls_spellings(typed: str, kind: str) -> None:
    assert kind_of(typed) == kind


def test_an_unknown_kind_names_the_field() -> None:
    with pytest.raises(InvalidQueryError, match=r'object\.kind: must be .* got "pod"'):
        kind_of("pod")


def test_event_lines_are_short_and_pending_pod_counts_fold() -> None:
    pods = [events_pb2.PodRef(name=f"w-{i}") for i in range(1000)]
    many = env("pods_pending", events_pb2.PodsPending(pods=pods))
    assert detail(many) == "1000 pods pending: w-0, w-1, w-10 +997 more"
    fewer = env("pods_pending", events_pb2.PodsPending(pods=pods[:2]))
    admitted = env("admitted", events_pb2.WorkloadAdmitted(admission=admission()))
    lines = fold([line_of(many), line_of(fewer), line_of(admitted)])
    assert [(line.type, line.count) for line in lines] == [
        ("workload.pods_pending", 2),
        ("workload.admitted", 1),
    ]
    assert lines[0].detail == "2 pods pending: w-0, w-1"  # the latest of the run


def test_an_admission_with_its_reservation_says_both_in_its_line() -> None:
    flavors = events_pb2.PodSetAssignment(name="main", flavors={"cpu": "default"})
    told = events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[flavors])
    alone = env("admitted", events_pb2.WorkloadAdmitted(admission=told))
    both = env("admitted", events_pb2.WorkloadAdmitted(admission=told, with_reservation=True))
    assert detail(alone) == "ClusterQueue cq in cluster local: cpu=default"
    assert (
        detail(both) == "quota reserved and admitted: ClusterQueue cq in cluster local: cpu=default"
    )


def test_a_copys_status_reads_as_kubectl_get_tells_it() -> None:
    def copied(status: str) -> str:
        return detail(env("copy_status", events_pb2.CopyStatus(status_json=status)))

    assert copied('{"active": 2, "ready": 1}') == "copy: 2 active, 1 ready"
    done = '{"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}'
    assert copied(done) == "copy: Complete, 2 succeeded"
    assert copied("{}") == "copy: no pods"
    assert copied("[1") == "copy's status unreadable"
    # A JobSet's copy ends Completed, not Complete.
    jobset = '{"conditions": [{"type": "Completed", "status": "True"}]}'
    assert copied(jobset) == "copy: Completed, no pods"
    # A worker's hostile status: conditions not a list are no end, not a TypeError.
    assert copied('{"active": 1, "conditions": 5}') == "copy: 1 active"


def test_reclaimable_pods_read_as_a_line_not_as_json() -> None:
    # `muster events` printed {"pods":[{"podSet":"main","count":2}]}.
    def told(*pods: tuple[str, int]) -> str:
        counts = [events_pb2.ReclaimablePodCount(pod_set=n, count=c) for n, c in pods]
        return detail(env("reclaimable_pods", events_pb2.WorkloadReclaimablePods(pods=counts)))

    assert told(("main", 2)) == "2 pods of main reclaimable (finished: their quota is freed)"
    assert told(("main", 1), ("aux", 3)) == (
        "1 pod of main, 3 pods of aux reclaimable (finished: their quota is freed)"
    )
    assert told() == "no pods reclaimable"


def test_a_forwarded_event_reads_as_what_moved_not_its_bytes_in_base64() -> None:
    # `muster describe` printed {"envelope":"CiQyN2Y1ZDdl...","sequence":"12",...}.
    inner = submitted()
    forwarded = events_pb2.WorkloadForwarded(
        envelope=inner.SerializeToString(),
        sequence=12,
        local_queue="ml/lq",
        from_partition=3,
        story=True,
    )
    garbled = events_pb2.WorkloadForwarded(envelope=b"\xff\xff", sequence=13)

    assert detail(env("forwarded", forwarded)) == (
        "workload.submitted #12 forwarded from partition 3 (its history; LocalQueue ml/lq moved)"
    )
    assert detail(env("forwarded", garbled)).startswith("an undecodable event #13 forwarded")


HOUR_NS = 3600 * 10**9


def at(e: events_pb2.Envelope, ns: int) -> events_pb2.Envelope:
    e.time_unix_nano = ns
    return e


def test_finished_workloads_are_forgotten_after_the_retention_by_the_streams_time() -> None:
    """Memory follows the work alive and the retention, not every workload ever finished:
    1 000 run and finish an hour apart each, and the book holds the last day's (task longrun;
    before, the last 10 000 whatever their age: all 1 000 here)."""
    book = WorkloadBook(finished_retention_s=24 * 3600)
    pods = [events_pb2.PodBinding(pod=events_pb2.PodRef(name="p0"), node="n1")]
    for i in range(1_000):
        key, t = f"ml/w-{i}", i * HOUR_NS
        book.apply(at(submitted(key, job=f"w-{i}"), t))
        book.apply(at(env("bound", events_pb2.PodsBound(bindings=pods), key), t))
        book.apply(at(env("finished", events_pb2.WorkloadFinished(succeeded=True), key), t))
    book.apply(at(submitted("ml/alive", job="alive"), 1_000 * HOUR_NS))

    assert len(book) == 23 + 1  # finished less than 24 h ago (977..999), and the one alive
    assert len(book.finished) == 23
    assert [e.key for e in book.find("ml", "w-977")] == ["ml/w-977"]
    assert book.find("ml", "w-976") == []  # exactly 24 h ago


def test_a_workload_past_the_retention_is_not_found_and_the_answer_says_why() -> None:
    book = WorkloadBook(finished_retention_s=60)
    book.apply(at(submitted(), 0))
    book.apply(at(env("finished", events_pb2.WorkloadFinished(succeeded=True)), HOUR_NS))
    assert one_named(book, "ml", "train").summary.status == "FINISHED"
    book.apply(at(submitted("ml/other", job="other"), HOUR_NS + 61 * 10**9))

    with pytest.raises(LookupError) as raised:
        one_named(book, "ml", "train")
    assert raised.value.args[0] == (
        'workload "train" not found in namespace ml (`-n` names another; `muster workloads` '
        "lists every namespace's; a finished workload is forgotten 60s after it finishes; "
        "`muster events` still shows its events)"
    )


def test_a_rebuilt_book_forgets_the_same_workloads() -> None:
    """The clock is the events' own: replayed later, the stream gives the same book."""
    events = [at(submitted(f"ml/w-{i}", job=f"w-{i}"), i * HOUR_NS) for i in range(5)]
    events += [
        at(env("finished", events_pb2.WorkloadFinished(succeeded=True), f"ml/w-{i}"), i * HOUR_NS)
        for i in range(5)
    ]
    events.sort(key=lambda e: e.time_unix_nano)
    first, second = WorkloadBook(finished_retention_s=7200), WorkloadBook(finished_retention_s=7200)
    for e in events:
        first.apply(e)
    for e in events:
        second.apply(e)
    # At 4 h, with 2 h kept: w-2 finished exactly 2 h before, so it goes too.
    assert [e.key for e in first] == [e.key for e in second] == ["ml/w-3", "ml/w-4"]


def test_a_negative_retention_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="finished retention must be >= 0 s, got -1"):
        WorkloadBook(finished_retention_s=-1)


def a_jobs_life(workload: str = "ml/job-train-1a2b3") -> list[events_pb2.Envelope]:
    """A Job's workload from its Submit to its end, as the services tell it."""
    start = submitted(workload)
    pod_set = events_pb2.PodSetSummary(name="main", count=2, requests={"cpu": "1"})
    start.submitted.pod_sets.append(pod_set)
    pods = [
        events_pb2.PodBinding(pod=events_pb2.PodRef(namespace="ml", name=f"p{i}"), node=f"n{i}")
        for i in range(2)
    ]
    route = events_pb2.WorkloadRouted(to_cluster_queue="cq", queue_name="lq")
    waiting = events_pb2.WorkloadPending(
        reason="WaitingForQuota", message="1 more needed", cluster_queue="cq"
    )
    check = events_pb2.AdmissionCheckUpdated(check="prov", state="Ready", message="booked")
    return [
        start,
        env("routed", route, workload),
        env("pending", waiting, workload),
        env("quota_reserved", events_pb2.QuotaReserved(admission=admission()), workload),
        env("admission_check", check, workload),
        env("admitted", events_pb2.WorkloadAdmitted(admission=admission()), workload),
        env("bound", events_pb2.PodsBound(bindings=pods), workload),
        env("running", events_pb2.WorkloadRunning(pods_ready=True), workload),
        env("finished", events_pb2.WorkloadFinished(succeeded=True), workload),
    ]


def answers(book: WorkloadBook, name: str = "train") -> list[object]:
    """What every query about a workload answers: `muster get`/`workloads` (its summary,
    listed), `describe` (and the dashboard's page), the cluster page's pods, stop/resume/delete."""
    entry = one_named(book, "ml", name)
    listed = summaries(matching(book, services_pb2.ListWorkloadsRequest(namespace="ml")), {})
    plans = [
        plan_workload(entry, verb, ALICE, idempotency_key="k") for verb in (STOP, RESUME, DELETE)
    ]
    return [
        [s.SerializeToString(deterministic=True) for s in listed],
        entry.describe().SerializeToString(deterministic=True),
        _pods_by_node(book, frozenset({"local"})),
        [(p.message, [e.WhichOneof("payload") for e in p.events]) for p in plans],
    ]


def unpacked_book(monkeypatch: pytest.MonkeyPatch, envs: list[events_pb2.Envelope]) -> WorkloadBook:
    """The book as it was before finished entries were packed."""
    with monkeypatch.context() as patch:
        patch.setattr(Entry, "pack", lambda self: None)
        return book_of(*envs)


def test_a_finished_workload_is_kept_packed_and_answers_every_query_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    life = a_jobs_life()
    book, before = book_of(*life), unpacked_book(monkeypatch, life)

    (entry,) = book
    assert entry.summary.status == "FINISHED"
    # Nothing but its summary and one serialized description: no message read from an event
    # (each holds its whole event, manifest and all) and no condition or line of its own.
    assert entry.packed is not None
    assert (entry.conditions, entry.pods, list(entry.lines)) == ({}, {}, [])
    assert (entry.admission, entry.route, entry.pod_sets) == (None, None, ())
    assert answers(book) == answers(before)
    described = entry.describe()
    assert [c.type for c in described.conditions] == [
        "QuotaReserved", "AdmissionCheck/prov", "Admitted", "PodsReady", "Finished"]  # fmt: skip
    assert [p.pod.name for p in described.pods] == ["p0", "p1"]
    assert (described.route.to_cluster_queue, described.pod_sets[0].count) == ("cq", 2)


def test_an_event_after_the_end_changes_a_packed_workload_as_an_unpacked_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Late news of a finished workload (its pods' eviction answered, a check's state, the
    same finish told twice) folds in as before, and it is packed again."""
    late = [
        env("eviction_completed", events_pb2.EvictionCompleted()),
        env("admission_check", events_pb2.AdmissionCheckUpdated(check="prov", state="Retry")),
        env("finished", events_pb2.WorkloadFinished(succeeded=True)),
        env("finished", events_pb2.WorkloadFinished(succeeded=True)),
    ]
    life = a_jobs_life() + late
    book, before = book_of(*life), unpacked_book(monkeypatch, life)

    (entry,) = book
    assert entry.packed is not None
    assert answers(book) == answers(before)
    assert entry.describe().events[-1].count == 2  # the finish told twice: one line


def test_a_deleted_finished_workload_is_gone_and_its_name_is_new_again() -> None:
    book = book_of(*a_jobs_life(), env("deleted", events_pb2.WorkloadDeleted()), submitted())

    (entry,) = book
    assert (entry.summary.status, entry.packed) == ("PENDING", None)
    assert [line.type for line in entry.describe().events] == ["workload.submitted"]


def test_two_clusters_limit_ranges_of_one_name_are_each_kept() -> None:
    """A LimitRange (as a Namespace) is each cluster's own: east's is not overwritten by
    west's of the same name, nor removed when west deletes its own."""

    def limit_range(field: str, cluster: str, cpu: str = "1") -> events_pb2.Envelope:
        obj = {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "defaults", "namespace": "ml"},
            "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": cpu}}]},
        }
        out = (config_applied if field == "applied" else config_deleted)(obj)
        e = new_event(out.field, out.payload, cluster=cluster, source="t")
        e.sequence = next(_seq)
        return e

    def cpu_of(cluster: str) -> str | None:
        found = book.config("LimitRange", f"{cluster}/ml/defaults")
        return json.loads(found[1])["spec"]["limits"][0]["defaultRequest"]["cpu"] if found else None

    book = book_of(limit_range("applied", "east", "1"), limit_range("applied", "west", "2"))
    assert (cpu_of("east"), cpu_of("west")) == ("1", "2")
    book.apply(limit_range("deleted", "west"))
    assert (cpu_of("east"), cpu_of("west")) == ("1", None)


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        ("FailedToStart", "FailedToStart"),
        ("", "Failed"),  # a `finished` written before it had a reason
        ("not a reason!", "Failed"),  # hostile: never a condition's reason
    ],
)
def test_a_failed_finish_shows_its_reason_in_the_condition_and_in_describe(
    reason: str, shown: str
) -> None:
    why = 'in admission check "prov": ... (podset "main")'
    book = book_of(
        submitted(),
        env("quota_reserved", events_pb2.QuotaReserved(admission=admission())),
        env("admitted", events_pb2.WorkloadAdmitted(admission=admission())),
        env("finished", events_pb2.WorkloadFinished(message=why, reason=reason)),
    )
    (entry,) = book.find("ml", "train")
    described = entry.describe()
    (finished,) = [c for c in described.conditions if c.type == "Finished"]
    assert (finished.status, finished.reason, finished.message) == ("True", shown, why)
    assert (entry.summary.status, entry.summary.reason) == ("FINISHED", shown)
    text = render_description(described)
    assert f"Reason:       {shown}: {why}\n" in text
    (told,) = [e for e in described.events if e.type == "workload.finished"]
    assert told.detail == ("failed to start: " if reason == shown else "failed ") + why
