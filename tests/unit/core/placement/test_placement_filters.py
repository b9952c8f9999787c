"""Where pods may go and where they are put: filters, their reasons, scoring and topology."""

from __future__ import annotations

import pytest
from placement_cluster import (
    bound,
    gang,
    kinds,
    members,
    node,
    placements,
    pod,
    scheduler,
    waiting,
)

from muster.api.model import LabelSelector, LabelSelectorRequirement, Taint, Toleration
from muster.core.placement.model import GangKey, NodeInfo, NodeName, Scoring
from muster.core.placement.scheduler import GangScheduler

GPU_TAINT = Taint(key="gpu", value="true")
every_scoring = pytest.mark.parametrize("scoring", ["binpack", "spread"])


# --- filters ---------------------------------------------------------------------------------


@every_scoring
def test_untolerated_taints_keep_pods_off_and_tolerations_let_them_on(scoring: Scoring) -> None:
    nodes = [node("gpu-0", taints=(GPU_TAINT,)), node("soft", cpu="0", taints=())]
    tolerant = pod("tolerant", tolerations=(Toleration(key="gpu", value="true"),))
    s = scheduler(nodes, pods=[pod("plain"), tolerant], scoring=scoring)

    decisions = s.schedule(now_s=0)

    assert placements(decisions) == {"tolerant": "gpu-0"}
    assert waiting(decisions) == {
        "plain": "0/2 nodes are available: 1 Insufficient cpu, "
        "1 node(s) had untolerated taint {gpu: true}"
    }


def test_prefer_no_schedule_taints_do_not_filter_and_exists_tolerates_any_value() -> None:
    nodes = [
        node("a", taints=(Taint(key="spot", effect="PreferNoSchedule"),)),
        node("b", taints=(Taint(key="team", value="ml", effect="NoExecute"),)),
    ]
    s = scheduler(
        nodes,
        pods=[
            pod("p", cpu="4"),
            pod("q", cpu="4", tolerations=(Toleration(key="team", operator="Exists"),)),
        ],
    )

    assert placements(s.schedule(now_s=0)) == {"p": "a", "q": "b"}


def test_node_selector_picks_nodes_by_label() -> None:
    nodes = [node("a", labels={"zone": "x"}), node("b", labels={"zone": "y"}), node("c")]
    s = scheduler(nodes, pods=[pod("p", selector={"zone": "y"}), pod("q", selector={"zone": "z"})])

    decisions = s.schedule(now_s=0)

    assert placements(decisions) == {"p": "b"}
    assert waiting(decisions) == {
        "q": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector"
    }


def expression(key: str, operator: str, *values: str) -> LabelSelector:
    return LabelSelector(
        match_expressions=(
            LabelSelectorRequirement(key=key, operator=operator, values=values),  # type: ignore[arg-type]
        )
    )


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ((expression("zone", "In", "y", "z"),), "b"),
        ((expression("zone", "NotIn", "x", "y"),), "c"),
        ((expression("zone", "Exists"),), "a"),
        ((expression("zone", "DoesNotExist"),), "c"),
        ((expression("zone", "In", "q"), LabelSelector(match_labels={"zone": "y"})), "b"),
    ],
    ids=["in", "not-in", "exists", "does-not-exist", "any-term"],
)
def test_required_node_affinity_terms(terms: tuple[LabelSelector, ...], expected: str) -> None:
    nodes = [node("a", labels={"zone": "x"}), node("b", labels={"zone": "y"}), node("c")]
    s = scheduler(nodes, pods=[pod("p", affinity=terms)])

    assert placements(s.schedule(now_s=0)) == {"p": expected}


def test_unschedulable_and_not_ready_nodes_are_skipped_until_they_recover() -> None:
    nodes = [node("cordoned", unschedulable=True), node("down", ready=False)]
    s = scheduler(nodes, pods=[pod("p")])

    assert waiting(s.schedule(now_s=0)) == {
        "p": "0/2 nodes are available: 1 node(s) were not ready, 1 node(s) were unschedulable"
    }
    s.upsert_node(node("down"))
    assert placements(s.schedule(now_s=1)) == {"p": "down"}


def test_pod_count_limit_counts_every_pod() -> None:
    s = scheduler([node("tiny", pods="2")], pods=[pod(f"p{i}", cpu="10m") for i in range(3)])

    decisions = s.schedule(now_s=0)

    assert placements(decisions) == {"p0": "tiny", "p1": "tiny"}
    assert waiting(decisions) == {"p2": "0/1 nodes are available: 1 Too many pods"}


def test_extended_resources_no_node_has_are_insufficient_everywhere() -> None:
    s = scheduler(
        [node("a"), node("b", nvidia_com_gpu="1")],
        pods=[pod("two-gpus", nvidia_com_gpu="2"), pod("one-gpu", nvidia_com_gpu="1")],
    )

    decisions = s.schedule(now_s=0)

    assert placements(decisions) == {"one-gpu": "b"}
    assert waiting(decisions) == {
        "two-gpus": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu"
    }


def test_no_nodes_at_all() -> None:
    s = scheduler(pods=[pod("p")])

    assert waiting(s.schedule(now_s=0)) == {"p": "no nodes in the cluster"}


# --- scoring and batching --------------------------------------------------------------------


def test_binpack_fills_the_fullest_node_and_spread_the_emptiest() -> None:
    def place(scoring: Scoring) -> dict[str, str]:
        nodes = [node("a"), node("b"), node("c", cpu="8")]
        s = scheduler(nodes, pods=[pod("busy", cpu="2", node="b")], scoring=scoring)
        s.schedule(now_s=0)
        for i in range(3):
            s.upsert_pod(pod(f"p{i}"))
        return placements(s.schedule(now_s=1))

    assert place("binpack") == {"p0": "b", "p1": "b", "p2": "a"}
    # a and c are both empty (by fraction); b is half full: dealt a, c, b
    assert place("spread") == {"p0": "a", "p1": "c", "p2": "b"}


def test_batching_places_several_identical_pods_on_one_node() -> None:
    nodes = [node("a", cpu="8"), node("b", cpu="8")]
    s = scheduler(nodes, gangs=[gang("g", 6)], pods=members("g", 6))

    assert set(placements(s.schedule(now_s=0)).values()) == {"a"}


def test_spread_deals_a_gang_round_robin() -> None:
    s = scheduler(
        [node(n, cpu="8") for n in "abc"],
        gangs=[gang("g", 5)],
        pods=members("g", 5),
        scoring="spread",
    )

    nodes = list(placements(s.schedule(now_s=0)).values())
    assert sorted(nodes) == ["a", "a", "b", "b", "c"]


def test_a_binpacked_batch_of_pods_goes_where_one_by_one_would() -> None:
    def cluster() -> GangScheduler:
        nodes = [node("a", cpu="3"), node("b", cpu="2"), node("c", cpu="5")]
        return scheduler(nodes, pods=[pod("x", cpu="1", node="c")])

    batch = cluster()
    for i in range(7):
        batch.upsert_pod(pod(f"p{i}", created_s=i))
    together = placements(batch.schedule(now_s=0))

    streamed = cluster()
    one_by_one: dict[str, str] = {}
    for i in range(7):
        streamed.upsert_pod(pod(f"p{i}", created_s=i))
        one_by_one |= placements(streamed.schedule(now_s=i))

    assert together == one_by_one
    assert sorted(together) == [f"p{i}" for i in range(7)]
    assert sorted(together.values()) == ["a", "a", "a", "c", "c", "c", "c"]


def test_ties_go_to_the_first_node_by_name_whatever_the_insertion_order() -> None:
    s = scheduler([node("c"), node("a"), node("b")], pods=[pod("p")])
    t = scheduler([node("a"), node("b"), node("c")], pods=[pod("p")])

    assert placements(s.schedule(now_s=0)) == placements(t.schedule(now_s=0)) == {"p": "a"}


def test_a_removed_node_frees_its_row_and_its_pods_count_again_when_it_returns() -> None:
    s = scheduler([node("a"), node("b")], pods=[pod("old", cpu="3", node="a")])
    s.remove_node(NodeName("a"))
    assert s.free(NodeName("a")) == {}

    s.upsert_node(node("c"))
    s.upsert_node(node("a"))
    assert s.free(NodeName("a"))["cpu"] == 1000
    s.upsert_pod(pod("p", cpu="2"))
    assert placements(s.schedule(now_s=0)) == {"p": "b"}


# --- topology --------------------------------------------------------------------------------


def racks(*sizes: int, cpu: str = "1") -> list[NodeInfo]:
    """Racks r0, r1, ... with `sizes[i]` nodes each, plus one node without a rack label."""
    nodes = [
        node(f"r{r}-n{i}", cpu=cpu, labels={"rack": f"r{r}"})
        for r, size in enumerate(sizes)
        for i in range(size)
    ]
    return [*nodes, node("loose", cpu="16")]


@pytest.mark.parametrize(("scoring", "rack"), [("binpack", "r1"), ("spread", "r2")])
def test_required_topology_puts_the_gang_in_one_rack(scoring: Scoring, rack: str) -> None:
    s = scheduler(
        racks(2, 3, 4),
        gangs=[gang("g", 3, topology="rack")],
        pods=members("g", 3),
        scoring=scoring,
    )

    chosen = set(placements(s.schedule(now_s=0)).values())

    assert {n.split("-")[0] for n in chosen} == {rack}


def test_required_topology_waits_when_no_rack_fits_even_if_the_cluster_does() -> None:
    s = scheduler(racks(2, 3), gangs=[gang("g", 4, topology="rack")], pods=members("g", 4))

    assert waiting(s.schedule(now_s=0)) == {"g": "no domain of rack fits the gang (4 pods)"}


def test_preferred_topology_falls_back_to_the_whole_cluster() -> None:
    s = scheduler(
        racks(2, 3, cpu="2"),
        gangs=[
            gang("a", 3, topology="rack", required=False),
            gang("b", 7, topology="rack", required=False, created_s=1),
        ],
        pods=[*members("a", 3), *members("b", 7)],
    )

    decisions = s.schedule(now_s=0)

    assert kinds(decisions) == [("GangPermitted", "a"), ("GangPermitted", "b")]
    found = placements(decisions)
    assert {found[f"a-{i}"].split("-")[0] for i in range(3)} == {"r0"}  # the tightest rack
    # no rack has room for 7 any more: anywhere, fullest nodes first
    assert sorted(found[f"b-{i}"] for i in range(7)) == ["loose"] * 6 + ["r0-n1"]


def test_a_retried_gang_stays_in_the_rack_its_bound_pods_are_in() -> None:
    nodes = [node("a", cpu="2", labels={"rack": "r0"}), node("b", cpu="2", labels={"rack": "r1"})]
    pods = members("g", 2)
    s = scheduler(nodes, gangs=[gang("g", 2, topology="rack")], pods=pods, scoring="spread")
    first = s.schedule(now_s=0)
    assert placements(first) == {"g-0": "a", "g-1": "a"}  # equal racks: the first by value
    s.upsert_pod(bound(pods[0], "a"))

    s.bind_failed(GangKey("ns/g"))  # g-1 again; rack r1 is roomier now, but g-0 is in r0
    assert placements(s.schedule(now_s=1)) == {"g-1": "a"}
