"""`muster service gangpermit` flags: each reaches the service's config, and each setting shows
in what gang-permit decides."""

from __future__ import annotations

import pytest
from cluster_docs import gang, node, objects, pod

from muster.gangpermit.__main__ import configs
from muster.gangpermit.state import GangPermitState
from muster.gangpermit.translate import decide


def test_flags_reach_the_config() -> None:
    service, config = configs(
        [
            "--cluster", "east", "--gang-timeout-seconds", "30", "--scheduler-name", "gangs",
            "--scoring", "spread", "--placement-preemption", "off",
            "--evict-resend-seconds", "7.5", "--ended-kept-seconds", "120",
        ]
    )  # fmt: skip
    assert service.name == "gangpermit"
    assert (config.cluster, config.gang_timeout_s, config.scheduler_name) == ("east", 30.0, "gangs")
    assert (config.scoring, config.preemption) == ("spread", False)
    assert config.evict_resend_s == 7.5  # its effect: test_gangpermit_evict_resend.py
    assert config.ended_kept_s == 120.0  # its effect: test_gangpermit_ended.py
    assert configs([])[1].ended_kept_s == 900.0  # the default


def test_an_evict_resend_of_zero_seconds_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        configs(["--evict-resend-seconds", "0"])
    assert exit_.value.code == 2
    assert "--evict-resend-seconds: evict re-send must be a finite number > 0 seconds, got 0" in (
        capsys.readouterr().err
    )


def test_defaults_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_GANG_TIMEOUT_SECONDS", "12")
    monkeypatch.setenv("MUSTER_SCHEDULER_NAME", "gangs")
    monkeypatch.setenv("MUSTER_SCORING", "spread")
    monkeypatch.setenv("MUSTER_PLACEMENT_PREEMPTION", "false")
    _, config = configs([])
    assert (config.gang_timeout_s, config.scheduler_name) == (12.0, "gangs")
    assert (config.scoring, config.preemption) == ("spread", False)
    monkeypatch.delenv("MUSTER_SCORING")
    monkeypatch.delenv("MUSTER_PLACEMENT_PREEMPTION")
    _, config = configs([])
    assert (config.scoring, config.preemption) == ("binpack", True)


def permitted_nodes(state: GangPermitState) -> list[str]:
    return [b.node for e in decide(state, now_s=1.0) for b in e.gang_permitted.bindings]


@pytest.mark.parametrize(("scoring", "nodes"), [("binpack", ["a", "a"]), ("spread", ["a", "b"])])
def test_scoring_packs_or_spreads_pods(scoring: str, nodes: list[str]) -> None:
    state = GangPermitState(cluster="local", scoring=scoring)  # type: ignore[arg-type]
    state.restored()
    for obj in objects(node("a", cpu="4") + node("b", cpu="4") + gang(pods=2)):
        state.put(obj)

    assert permitted_nodes(state) == nodes


def test_only_pods_naming_the_scheduler_are_placed() -> None:
    state = GangPermitState(cluster="local", scheduler_name="gangs")
    state.restored()
    ours = pod("ours")
    ours[0]["spec"]["schedulerName"] = "gangs"
    for obj in objects(node("a") + pod("muster-named") + ours):
        state.put(obj)

    (permit,) = decide(state, now_s=1.0)
    assert permit.workload == "ns/ours"


@pytest.mark.parametrize("preemption", [True, False])
def test_placement_preemption_can_be_turned_off(preemption: bool) -> None:
    state = GangPermitState(cluster="local", preemption=preemption)
    state.restored()
    low = [pod(f"low-{i}", node_name="a")[0] for i in range(2)]
    high = gang(pods=1, cpu="2")
    high[1]["spec"]["priority"] = 100
    for obj in objects(node("a") + low + high):
        state.put(obj)

    types = [e.type for e in decide(state, now_s=1.0)]

    if preemption:
        assert types == ["workload.placement_preempted", "cmd.evict", "cmd.evict"]
    else:
        assert types == ["workload.gang_waiting"]
