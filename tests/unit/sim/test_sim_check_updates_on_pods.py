"""`muster simulate` puts a Ready check's podSetUpdates on the pods it makes, as the binder does
on a cluster: the ProvisioningRequest controller's answer names the request the pods consume.
Before task simfix the simulated pods never carried them."""

from __future__ import annotations

from pathlib import Path

from muster.sim import load_scenario, simulate

SCENARIO = Path(__file__).parents[2] / "scenarios/checks/provisioning-provisioned.yaml"
NODE = """\
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {capacity: {cpu: "4"}}
"""
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS = "autoscaling.x-k8s.io/provisioning-class-name"


def test_the_provisioned_requests_name_reaches_the_simulated_pods(tmp_path: Path) -> None:
    node = tmp_path / "node.yaml"
    node.write_text(NODE)
    result = simulate(load_scenario([SCENARIO, node]))

    pods = {state.pod.meta.name: state for state in result.pods}
    assert sorted(pods) == ["w-main-0", "w-main-1"]
    for state in pods.values():
        assert state.node == "n1"
        annotations = state.pod.meta.annotations
        assert annotations[CONSUME] == "w-prov-1"
        assert annotations[CLASS] == "check-capacity.autoscaling.x-k8s.io"
        assert annotations["muster.dev/pod-set"] == "main"
