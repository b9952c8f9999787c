"""A `gang_waiting`'s id names the gang's pods by a fold of their uids kept as pods come and go
(`gangpermit.member_uids`), not by hashing every uid at each one: the fold is what hashing
them from scratch would give, and pods met in another order give the same ids."""

from __future__ import annotations

from cluster_docs import GANG, fed, gang, node, objects, pod

from muster.core.placement.model import GangKey
from muster.gangpermit.member_uids import MODULUS, uid_hash
from muster.gangpermit.state import GangPermitState
from muster.gangpermit.translate import decide


def from_scratch(state: GangPermitState, key: GangKey) -> str:
    uids = [state.pods[p].meta.uid for p in state.feed.members.get(key, {}) if p in state.pods]
    return f"{len(uids)}:{sum(uid_hash(u) for u in uids) % MODULUS:032x}"


def test_the_fold_follows_pods_joining_leaving_and_replaced() -> None:
    state = fed(node("a", cpu="1") + gang(pods=4))
    assert from_scratch(state, GangKey(GANG)).startswith("4:")
    assert state.member_uids.digest(GangKey(GANG)) == from_scratch(state, GangKey(GANG))

    (gone,) = objects(pod("train-1", workload="train"))
    state.remove(gone)
    (replaced,) = objects(pod("train-2", workload="train", uid="another"))
    state.put(replaced)
    (alone,) = objects(pod("train-3"))  # no longer of the gang
    state.put(alone)

    assert from_scratch(state, GangKey(GANG)).startswith("2:")
    assert state.member_uids.digest(GangKey(GANG)) == from_scratch(state, GangKey(GANG))


def test_a_gang_waiting_met_in_another_order_after_a_restart_has_the_same_id() -> None:
    docs = node("a", cpu="1") + gang(pods=5)
    workload, *pods = gang(pods=5)

    (waiting,) = decide(fed(docs), now_s=1.0)
    (again,) = decide(fed([*node("a", cpu="1"), workload, *reversed(pods)]), now_s=2.0)

    assert waiting.type == "workload.gang_waiting"
    assert again.event_id == waiting.event_id
    # Another gang of the same name (its pods made again): another id.
    (other,) = decide(
        fed(docs[:2] + [pod(f"train-{i}", workload="train", uid=f"new-{i}")[0] for i in range(5)]),
        now_s=3.0,
    )
    assert other.gang_waiting.reason == waiting.gang_waiting.reason
    assert other.event_id != waiting.event_id
