"""`muster up`'s checks of the cluster it would serve, before anything starts: --nodes is the
simulated cluster's and is refused on the Kubernetes backend; a bad MUSTER_CLUSTER_BACKEND is
told as a service would tell it."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.cli.main import main


def test_nodes_are_refused_on_the_kube_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("kind: Node\nmetadata: {name: n}\n")
    monkeypatch.setenv("MUSTER_CLUSTER_BACKEND", "kube")
    monkeypatch.setenv("MUSTER_KUBE_HOST", "http://127.0.0.1:1")

    status = main(["up", "--state-dir", str(tmp_path / "state"), "--nodes", str(nodes)])

    assert status == 2
    assert capsys.readouterr().err == (
        f"muster up: --nodes {nodes}: the simulated cluster's Nodes; with "
        "MUSTER_CLUSTER_BACKEND=kube the cluster is the API server's, with the Nodes it has\n"
    )
    assert not (tmp_path / "state").exists()  # nothing started


def test_a_bad_backend_is_named_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MUSTER_CLUSTER_BACKEND", "kubernetes")

    assert main(["up", "--state-dir", str(tmp_path / "state")]) == 2

    assert capsys.readouterr().err == (
        "muster up: --cluster-backend must be one of sim, kube, got 'kubernetes'\n"
    )
