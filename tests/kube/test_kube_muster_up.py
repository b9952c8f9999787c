"""`muster up` on the Kubernetes backend (`MUSTER_CLUSTER_BACKEND=kube`), against the
API-server stand-in, as the README's "On your machine, against the API-server stand-in" runs
it: no simulator starts, and what `up` prints names the API server and the Nodes it sees."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from kube_services_helpers import Kubectl

from muster.devtools.apiserver import ApiServer
from muster.launcher.upstate import read_state

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]
NODES = "---".join(
    f"""
apiVersion: v1
kind: Node
metadata: {{name: node-{i}, labels: {{kubernetes.io/hostname: node-{i}}}}}
status:
  capacity: {{cpu: "8", memory: 32Gi, pods: "110"}}
  conditions: [{{type: Ready, status: "True"}}]
"""
    for i in (1, 2)
)


async def muster(env: dict[str, str], *argv: str) -> tuple[int, str]:
    """`muster ARGV`'s exit status and output, run while the stand-in serves on this loop."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster.cli.main", *argv, env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=150)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_up_on_kube_starts_no_simulator_and_names_the_api_server_and_its_nodes(
    tmp_path: Path,
) -> None:
    async with ApiServer(bookmark_interval_s=0.2) as standin:
        kubectl = Kubectl(standin.url)
        try:
            await kubectl.install_crds()
            await kubectl.apply(NODES)
        finally:
            kubectl.close()
        env = {
            **os.environ,
            "MUSTER_CLUSTER_BACKEND": "kube",
            "MUSTER_KUBE_HOST": standin.url,
            "MUSTER_STATE_DIR": str(tmp_path),
            **{f"MUSTER_UP_{p}_PORT": "0" for p in ("GATEWAY", "NATS", "DASHBOARD", "METRICS")},
        }
        env.pop("MUSTER_GATEWAY", None)
        status, out = await muster(env, "up")
        try:
            assert status == 0, out
            assert f"the Kubernetes API server {standin.url}, 2 Nodes (node-1, node-2)" in out
            assert "simulated" not in out
            state = read_state(tmp_path)
            assert state is not None
            assert "sim-cluster" not in {p.name for p in state.processes}
            assert {"watcher", "binder", "gangpermit", "gateway"} <= {
                p.name for p in state.processes
            }
            # A client command finds this stack's gateway (port 0 picked any) as status does.
            assert await muster(env, "workloads") == (0, "No workloads found.\n")
        finally:
            await muster(env, "down")


async def test_up_on_kube_says_which_api_server_it_cannot_reach_and_starts_nothing(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "MUSTER_CLUSTER_BACKEND": "kube",
        "MUSTER_KUBE_HOST": "http://127.0.0.1:1",  # nothing listens there
        "MUSTER_STATE_DIR": str(tmp_path),
        **{f"MUSTER_UP_{p}_PORT": "0" for p in ("GATEWAY", "NATS", "DASHBOARD", "METRICS")},
    }

    status, out = await muster(env, "up")

    assert status == 1, out
    assert out.startswith(
        "muster up: the Kubernetes API server http://127.0.0.1:1: cannot list its Nodes: "
    )
    assert read_state(tmp_path) is None  # nothing left to stop
