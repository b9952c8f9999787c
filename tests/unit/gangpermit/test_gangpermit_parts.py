"""A permit too large for one event goes in parts that each fit (docs/events.md, "Permits in
parts"), and a restarted gang-permit holds a permit in parts until every part is answered.

The bus's limit is lowered here so that a gang of a few hundred pods needs parts, as one of
100 000 pods does at the default 1 MiB.
"""

from __future__ import annotations

from cluster_docs import GANG, event, fed, gang, node

from muster.bus.envelope import encode
from muster.contracts.v1 import events_pb2
from muster.gangpermit.parts import part_id
from muster.gangpermit.translate import decide

LIMIT = 8 * 1024
PODS = 300  # ~45 bytes a binding here: 13 KB of bindings, two parts under LIMIT


def full_nodes() -> list[dict[str, object]]:
    """Three nodes that together take the gang's pods (1 CPU each) and nothing more."""
    return [doc for name in ("a", "b", "c") for doc in node(name, cpu=str(PODS // 3))]


def test_a_permit_over_the_event_limit_goes_in_parts_that_each_fit_and_name_every_pod_once() -> (
    None
):
    cluster = full_nodes() + gang(pods=PODS)

    parts = decide(fed(cluster, max_event_bytes=LIMIT), now_s=10.0)

    assert [e.type for e in parts] == ["workload.gang_permitted"] * len(parts)
    assert len(parts) > 1
    assert all(len(encode(e)) <= LIMIT for e in parts)
    whole = parts[0].gang_permitted.permit_id
    assert whole
    assert [(e.gang_permitted.part, e.gang_permitted.parts) for e in parts] == [
        (k, len(parts)) for k in range(len(parts))
    ]
    assert [e.event_id for e in parts] == [part_id(whole, k) for k in range(len(parts))]
    assert {e.gang_permitted.permit_id for e in parts} == {whole}
    names = [b.pod.name for e in parts for b in e.gang_permitted.bindings]
    assert sorted(names) == sorted(f"train-{i}" for i in range(PODS))
    assert len(set(names)) == PODS
    # Repeated after a crash (nothing reached the stream): the same ids, deduplicated.
    again = decide(fed(cluster, max_event_bytes=LIMIT), now_s=12.0)
    assert [e.event_id for e in again] == [e.event_id for e in parts]


def test_a_permit_that_fits_is_one_event_as_before_parts_existed() -> None:
    cluster = full_nodes() + gang(pods=PODS)

    (permit,) = decide(fed(cluster), now_s=10.0)  # the default limit, 1 MiB

    assert (permit.gang_permitted.parts, permit.gang_permitted.permit_id) == (0, "")
    assert len(permit.gang_permitted.bindings) == PODS
    # Its id is the whole permit's, as when parts are needed: one derivation for both.
    parts = decide(fed(cluster, max_event_bytes=LIMIT), now_s=10.0)
    assert parts[0].gang_permitted.permit_id == permit.event_id


def answer(field: str, permit_part: events_pb2.Envelope, sequence: int) -> events_pb2.Envelope:
    if field == "bound":
        payload: object = events_pb2.PodsBound(bindings=permit_part.gang_permitted.bindings)
    else:
        payload = events_pb2.GangRejected(reason="BindFailed", message="refused")
    env = event(field, payload, workload=GANG, cause=permit_part)
    env.sequence = sequence
    return env


def test_a_restored_permit_in_parts_holds_its_node_until_every_part_is_answered() -> None:
    cluster = full_nodes() + gang(pods=PODS)
    parts = decide(fed(cluster, max_event_bytes=LIMIT), now_s=10.0)
    for n, env in enumerate(parts, start=1):
        env.sequence = n
    first, *rest = parts
    assert rest

    # The binder refused a pod of the first part and has not answered the others yet: the
    # permit still holds every node ("zz" sorts after "train": the first gang goes first).
    stream = [*parts, answer("gang_rejected", first, len(parts) + 1)]
    restarted = fed(cluster + gang("zz", pods=1), stream=stream, max_event_bytes=LIMIT)
    (waiting,) = decide(restarted, now_s=11.0)
    assert (waiting.type, waiting.workload) == ("workload.gang_waiting", "ns/zz/workers")

    # Every other part answered (bound, but none of its pods seen bound: the bind was undone,
    # say): only now is the permit answered, its failure with it, and the gang goes again.
    for n, part in enumerate(rest, start=len(parts) + 2):
        restarted.apply_event(answer("bound", part, n))
    again = decide(restarted, now_s=12.0)
    assert {e.type for e in again} == {"workload.gang_permitted"}
    assert {e.workload for e in again} == {GANG}
    assert again[0].gang_permitted.permit_id != first.gang_permitted.permit_id


def test_a_permit_cut_short_by_a_crash_between_parts_places_the_rest_of_its_gang_anew() -> None:
    cluster = full_nodes() + gang(pods=PODS)
    first, *_ = decide(fed(cluster, max_event_bytes=LIMIT), now_s=10.0)
    first.sequence = 1
    named = {b.pod.name for b in first.gang_permitted.bindings}

    # Only part 0 was stored before gang-permit died: its pods stay held where it put them
    # (the binder binds them), and the gang's other pods are permitted again, on what is left.
    restarted = fed(cluster, stream=[first], max_event_bytes=LIMIT)
    again = decide(restarted, now_s=11.0)

    assert {e.type for e in again} == {"workload.gang_permitted"}
    placed = [b.pod.name for e in again for b in e.gang_permitted.bindings]
    assert sorted(placed) == sorted({f"train-{i}" for i in range(PODS)} - named)


def test_a_gang_too_large_to_list_times_out_in_an_event_that_fits_without_its_pods() -> None:
    state = fed(node("a", cpu="10") + gang(pods=PODS), max_event_bytes=LIMIT)
    (waiting,) = decide(state, now_s=0.0)
    assert waiting.type == "workload.gang_waiting"

    (rejected,) = decide(state, now_s=301.0)  # the default timeout

    assert (rejected.type, rejected.gang_rejected.reason) == (
        "workload.gang_rejected",
        "GangTimedOut",
    )
    assert list(rejected.gang_rejected.pods) == []
    assert len(encode(rejected)) <= LIMIT
    small = fed(node("a", cpu="1") + gang(pods=2), max_event_bytes=LIMIT)
    decide(small, now_s=0.0)
    (listed,) = decide(small, now_s=301.0)
    assert [p.name for p in listed.gang_rejected.pods] == ["train-0", "train-1"]
