"""Node manifests for the benchmarks that run pods on the simulated cluster."""

from __future__ import annotations


def node_manifests(
    count: int, *, cpu: int, memory: str, pods: int, digits: int = 0
) -> list[dict[str, object]]:
    """`count` Ready nodes `node-<n>` (`n` zero-padded to `digits`) with this allocatable."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{n:0{digits}d}"},
            "status": {"allocatable": {"cpu": str(cpu), "memory": memory, "pods": str(pods)}},
        }
        for n in range(count)
    ]
