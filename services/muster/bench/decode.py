"""The decode section: how fast user YAML becomes objects, and a 1 000-object Submit is planned.

Multi-document YAML of Kueue Workloads (about 300 bytes each, 3 500 to the MiB, block style as
written by hand) is read by `muster.api.decode_yaml` with strict field validation, the
path `muster simulate` and `Gateway.Submit` take; the Submit row plans one manifest of 1 000
Workloads with `muster.gateway.submit.plan_submit` (decoding, the events and their ids). The
heartbeat rows encode and decode a gang-permit's `MUSTER_CLUSTERS` heartbeat of 5 000 and
50 000 nodes (20 labels each, the hostname among them, 10 node pools, one with a taint; a third
of the nodes busy) in layout 1 (each node in full) and layout 2 (tables, `muster.core.heartbeat`);
bytes is the heartbeat's size. The "gang-permit room" rows time one heartbeat of a gang-permit
holding that cluster (`muster.bench.heartbeat_room`). Each other case runs three times; the
fastest counts (the machine is shared).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator

import msgspec

from muster.api import decode_yaml
from muster.api.model import Taint
from muster.bench.heartbeat_room import median_beat
from muster.bench.table import Column, number, render_table
from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat import decode_heartbeat, pack
from muster.core.heartbeat import encode as encode_wire
from muster.gateway.submit import plan_submit

SECTION = "decode"
MIB = 1024 * 1024
YAML_SIZES_MIB = (1, 10)
SUBMIT_OBJECTS = 1_000
HEARTBEAT_NODES = (5_000, 50_000)
HEARTBEAT_POOLS = 10
TARGET_MIB_PER_S = 10.0
_TRIES = 3

_WORKLOAD = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{name: w-{i}, namespace: team-{team}}}
spec:
  queueName: lq-{team}
  priority: {priority}
  podSets:
  - name: main
    count: 2
    template:
      spec:
        containers:
        - name: c
          resources: {{requests: {{cpu: 500m, memory: 1Gi}}}}
"""


class DecodeRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str
    case: str  # "yaml 1 MiB", "submit plan"
    scale: float
    objects: int
    bytes: int
    wall_s: float
    mib_per_s: float
    objects_per_s: float


def manifest(objects: int) -> str:
    """`objects` Workloads as one multi-document YAML text."""
    return "---\n".join(
        _WORKLOAD.format(i=i, team=i % 10, priority=i % 100) for i in range(objects)
    )


def objects_for(size_bytes: int) -> int:
    """How many Workloads make about `size_bytes` of YAML."""
    return max(1, round(size_bytes / len(manifest(1).encode())))


def run(*, scale: float) -> Iterator[DecodeRow]:
    """One row per YAML size, then the Submit planning row."""
    for size in YAML_SIZES_MIB:
        text = manifest(objects_for(int(size * MIB * scale)))
        yield _measure(f"yaml {size * scale:g} MiB", text, scale=scale, decode=_decode)
    count = max(1, round(SUBMIT_OBJECTS * scale))
    yield _measure(f"submit plan {count}", manifest(count), scale=scale, decode=_plan)
    for nodes in HEARTBEAT_NODES:
        yield from _heartbeat_rows(max(1, round(nodes * scale)), scale=scale)
    for nodes in HEARTBEAT_NODES:
        count = max(1, round(nodes * scale))
        wall_s, size = median_beat(heartbeat_cluster(count).nodes)
        case = f"heartbeat {count} nodes, gang-permit room after a bind"
        yield _row(case, size, count, wall_s, scale=scale)


def heartbeat_cluster(nodes: int) -> ClusterCapacity:
    """`nodes` nodes with 20 labels each, as a cloud's node pools label them."""
    return ClusterCapacity(
        cluster="bench", nodes=tuple(_pool_node(i) for i in range(nodes)), placed=("ns/w",)
    )


def _pool_node(i: int) -> NodeRoom:
    pool = i % HEARTBEAT_POOLS
    name = f"pool-{pool}-node-{i:06d}"
    size = 8 * (pool % 3 + 1)
    zone = f"europe-west4-{'abc'[pool % 3]}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"n2-standard-{size}",
        "beta.kubernetes.io/instance-type": f"n2-standard-{size}",
        "topology.kubernetes.io/region": "europe-west4",
        "topology.kubernetes.io/zone": zone,
        "failure-domain.beta.kubernetes.io/region": "europe-west4",
        "failure-domain.beta.kubernetes.io/zone": zone,
        "cloud.google.com/gke-nodepool": f"pool-{pool}",
        "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/machine-family": "n2",
        "cloud.google.com/gke-boot-disk": "pd-balanced",
        "cloud.google.com/gke-container-runtime": "containerd",
        "cloud.google.com/gke-netd-ready": "true",
        "cloud.google.com/private-node": "false",
        "example.com/tier": f"tier-{pool % 2}",
        "example.com/team": f"team-{pool}",
    }
    room = {"cpu": 990 * size, "memory": size * 3_700_000_000_000, "pods": 110_000}
    busy = i % 3 * 1000
    free = {"cpu": room["cpu"] - busy, "memory": room["memory"], "pods": room["pods"] - busy}
    taints = (Taint(key="nvidia.com/gpu", value="present"),) if pool == 9 else ()
    return NodeRoom(name=name, labels=labels, taints=taints, allocatable=room, free=free)


def _heartbeat_rows(nodes: int, *, scale: float) -> Iterator[DecodeRow]:
    capacity = heartbeat_cluster(nodes)
    layouts: dict[str, Callable[[], bytes]] = {
        "1": functools.partial(msgspec.json.encode, capacity),
        "2": lambda: encode_wire(pack(capacity)),
    }
    for layout, encode in layouts.items():
        data = encode()
        case = f"heartbeat {nodes} nodes, layout {layout}"
        decode = functools.partial(decode_heartbeat, data, key=capacity.cluster)
        yield _row(f"{case} encode", len(data), nodes, _fastest(encode), scale=scale)
        yield _row(f"{case} decode", len(data), nodes, _fastest(decode), scale=scale)


def _decode(text: str) -> int:
    objects, errors = decode_yaml(text, source="bench")
    if errors:
        raise AssertionError(f"bench input does not decode: {errors[0]}")
    return len(objects)


def _plan(text: str) -> int:
    return len(plan_submit(text, cluster="local", submission="bench"))


def _measure(case: str, text: str, *, scale: float, decode: Callable[[str], int]) -> DecodeRow:
    counts: list[int] = []
    best_s = _fastest(lambda: counts.append(decode(text)))
    return _row(case, len(text.encode()), counts[-1], best_s, scale=scale)


def _fastest(run: Callable[[], object]) -> float:
    """Seconds of the fastest of `_TRIES` runs."""
    best = float("inf")
    for _ in range(_TRIES):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def _row(case: str, size: int, count: int, best_s: float, *, scale: float) -> DecodeRow:
    return DecodeRow(
        section=SECTION,
        case=case,
        scale=scale,
        objects=count,
        bytes=size,
        wall_s=round(best_s, 4),
        mib_per_s=round(size / MIB / best_s, 2),
        objects_per_s=round(count / best_s),
    )


def columns() -> list[Column[DecodeRow]]:
    return [
        Column("case", lambda r: r.case, numeric=False),
        Column("objects", lambda r: f"{r.objects:,}".replace(",", " ")),
        Column("bytes", lambda r: f"{r.bytes:,}".replace(",", " ")),
        Column("wall s", lambda r: number(r.wall_s)),
        Column("MiB/s", lambda r: number(r.mib_per_s, digits=1)),
        Column("objects/s", lambda r: f"{r.objects_per_s:,.0f}".replace(",", " ")),
    ]


def render(rows: list[DecodeRow]) -> str:
    yaml_rows = [r for r in rows if r.case.startswith("yaml")]
    slowest = min((r.mib_per_s for r in yaml_rows), default=0.0)
    met = "met" if slowest >= TARGET_MIB_PER_S else "not met"
    note = f"target >= {TARGET_MIB_PER_S:g} MiB/s decoding YAML: {met} ({slowest:g} MiB/s)\n"
    return render_table(columns(), rows) + note
