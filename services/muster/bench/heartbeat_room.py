"""Rows of the decode section: what one gang-permit heartbeat costs in a large cluster.

A gang-permit's state holds `nodes` nodes (`decode.heartbeat_cluster`'s pools: 20 labels each);
each heartbeat follows one pod bound on another node, as in a busy cluster, and computes the
room (`GangPermitState.capacity`) and the values to put at 1 MiB max_payload (NATS's default:
one value, or parts and their head, `muster.core.heartbeat_parts`). Wall is the median of
`BEATS` heartbeats; bytes, what that heartbeat puts (the parts that changed and the head).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from muster.api import decode_documents
from muster.core.dispatch import NodeRoom
from muster.core.heartbeat_parts import Heartbeat, encode_room
from muster.gangpermit.state import GangPermitState

MAX_PAYLOAD = 1024 * 1024
BEATS = 7


def node_doc(labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": labels["kubernetes.io/hostname"], "labels": dict(labels)},
        "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}},
    }


def bound_pod(i: int, node: str) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{i}", "namespace": "bench", "uid": f"uid-{i}"},
        "spec": {"nodeName": node, "containers": [container]},
        "status": {"phase": "Running"},
    }


def state_of(docs: list[dict[str, Any]]) -> GangPermitState:
    state = GangPermitState(cluster="bench")
    for obj in _objects(docs):
        state.put(obj)
    return state


def _objects(docs: list[dict[str, Any]]) -> list[Any]:
    objects, errors = decode_documents(docs)
    if errors:
        raise AssertionError(f"bench input does not decode: {errors[0]}")
    return objects


def beats(state: GangPermitState, names: list[str]) -> Iterator[tuple[float, int]]:
    """(seconds, bytes put) of each heartbeat after a pod's bind."""
    last: Heartbeat | None = encode_room(state.capacity(), max_bytes=MAX_PAYLOAD)
    for beat in range(BEATS):
        (pod,) = _objects([bound_pod(beat, names[(beat * 7919) % len(names)])])
        state.put(pod)
        started = time.perf_counter()
        room = encode_room(state.capacity(), max_bytes=MAX_PAYLOAD, last=last)
        spent = time.perf_counter() - started
        before = last.parts if last is not None else ()
        fresh = [p for n, p in enumerate(room.parts) if n >= len(before) or p != before[n]]
        yield spent, len(room.head) + sum(map(len, fresh))
        last = room


def median_beat(rooms: Sequence[NodeRoom]) -> tuple[float, int]:
    """Seconds of the median heartbeat of a state holding `rooms`' nodes, and the most bytes
    one put."""
    state = state_of([node_doc(room.labels) for room in rooms])
    measured = list(beats(state, [room.name for room in rooms]))
    return statistics.median(s for s, _ in measured), max(b for _, b in measured)
