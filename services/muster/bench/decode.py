"""The decode section: how fast user YAML becomes objects, and a 1 000-object Submit is planned.

Multi-document YAML of Kueue Workloads (about 300 bytes each, 3 500 to the MiB, block style as
written by hand) is read by `muster.api.decode_yaml` with strict field validation, the
path `muster simulate` and `Gateway.Submit` take; the Submit row plans one manifest of 1 000
Workloads with `muster.gateway.submit.plan_submit` (decoding, the events and their ids). Each
case runs three times; the fastest counts (the machine is shared).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import msgspec

from muster.api import decode_yaml
from muster.bench.table import Column, number, render_table
from muster.gateway.submit import plan_submit

SECTION = "decode"
MIB = 1024 * 1024
YAML_SIZES_MIB = (1, 10)
SUBMIT_OBJECTS = 1_000
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


def _decode(text: str) -> int:
    objects, errors = decode_yaml(text, source="bench")
    if errors:
        raise AssertionError(f"bench input does not decode: {errors[0]}")
    return len(objects)


def _plan(text: str) -> int:
    return len(plan_submit(text, cluster="local", submission="bench"))


def _measure(case: str, text: str, *, scale: float, decode: Callable[[str], int]) -> DecodeRow:
    size = len(text.encode())
    best = float("inf")
    count = 0
    for _ in range(_TRIES):
        started = time.perf_counter()
        count = decode(text)
        best = min(best, time.perf_counter() - started)
    return DecodeRow(
        section=SECTION,
        case=case,
        scale=scale,
        objects=count,
        bytes=size,
        wall_s=round(best, 4),
        mib_per_s=round(size / MIB / best, 2),
        objects_per_s=round(count / best),
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
