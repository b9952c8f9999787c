"""The MUSTER_CLUSTERS heartbeat on the wire: nodes share their labels, taints and resource
vectors through tables (layout 2), readers take layout 1 too, and a heartbeat over NATS's
max_payload goes in parts (tests/unit/core/test_heartbeat_parts.py), and one over every part is
replaced by one that says so."""

from __future__ import annotations

import msgspec
import pytest

from muster.api.model import Taint
from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat import ROOM_TOO_LARGE, decode_heartbeat, encode, pack, reached
from muster.core.heartbeat_parts import MAX_PARTS, encode_room

CPU = 1000
UNLIMITED = 1 << 40


def pool_node(name: str, pool: str, *, busy: int = 0, gpu: bool = False) -> NodeRoom:
    labels = {
        "kubernetes.io/hostname": name,
        "cloud.google.com/gke-nodepool": pool,
        "topology.kubernetes.io/zone": "europe-west4-a",
    }
    room = {"cpu": 8 * CPU, "pods": 110 * CPU}
    return NodeRoom(
        name=name,
        labels=labels,
        taints=(Taint(key="nvidia.com/gpu", value="present"),) if gpu else (),
        allocatable=room,
        free={"cpu": room["cpu"] - busy * CPU, "pods": room["pods"] - busy * CPU},
    )


def cluster(nodes: int) -> ClusterCapacity:
    rooms = tuple(
        pool_node(f"node-{i}", f"pool-{i % 2}", busy=i % 3, gpu=i % 2 == 1) for i in range(nodes)
    )
    return ClusterCapacity(cluster="east", nodes=rooms, placed=("ns/a", "ns/b"))


def test_nodes_of_a_pool_share_their_tables_and_decode_unchanged() -> None:
    capacity = cluster(30)
    room = encode_room(capacity, max_bytes=UNLIMITED)
    assert (room.too_large, room.parts) == ("", ())
    data = room.head
    assert decode_heartbeat(data, key="east") == capacity
    wire = msgspec.json.decode(data)
    assert wire["layout"] == 2
    # Two pools (the hostname put back by the reader), two taint sets, and the vectors of
    # idle and busy nodes (allocatable is an idle node's free room).
    assert len(wire["label_sets"]) == 2
    assert wire["label_sets"][0][1] == ["kubernetes.io/hostname"]
    assert len(wire["taint_sets"]) == 2
    assert len(wire["vectors"]) == 3
    assert wire["rows"][4] == ["node-4", 0, 0, 0, 1]  # pool-0, no taint, busy as node-1
    assert len(data) < len(msgspec.json.encode(capacity)) / 2


def test_a_heartbeat_of_the_old_layout_is_read_as_before() -> None:
    """Layout 1, as gang-permits before the tables write it (an upgrade's readers first)."""
    capacity = cluster(3)
    assert decode_heartbeat(msgspec.json.encode(capacity), key="east") == capacity
    unreachable = ClusterCapacity(cluster="east", unreachable="refused", reason="BadKubeConfig")
    assert decode_heartbeat(msgspec.json.encode(unreachable), key="east") == unreachable
    assert not reached(unreachable)


def test_an_index_that_points_nowhere_is_refused_naming_the_row() -> None:
    wire = msgspec.json.decode(encode(pack(cluster(2))))
    wire["rows"][1][3] = 7
    with pytest.raises(
        msgspec.ValidationError, match=r"\$\.rows\[1\]\[3\]: vectors has no entry 7"
    ):
        decode_heartbeat(msgspec.json.encode(wire), key="east")
    wire["rows"][1] = ["node-1", -1, 0, 0, 0]
    with pytest.raises(msgspec.DecodeError, match=r"\$\.rows\[1\]\[1\]: label_sets has no entry"):
        decode_heartbeat(msgspec.json.encode(wire), key="east")


def test_a_room_over_every_part_says_so_and_the_cluster_is_still_reached() -> None:
    capacity = cluster(2000)
    size = len(encode(pack(capacity)))
    max_bytes = size // (MAX_PARTS // 4)  # 16 times smaller: parts do it
    split = encode_room(capacity, max_bytes=max_bytes)
    assert len(split.parts) > 1
    max_bytes = size // (2 * MAX_PARTS)  # over every part
    room = encode_room(capacity, max_bytes=max_bytes)
    assert encode_room(capacity, max_bytes=max_bytes, last=split).head == room.head
    assert room.too_large.startswith("its room report of ")
    assert room.too_large.endswith(
        f"bytes (2000 nodes) does not fit in {MAX_PARTS} messages of the {max_bytes} bytes "
        "NATS takes in one (max_payload): raise max_payload on nats-server, or run fewer nodes "
        "in this cluster"
    )
    assert room.parts == ()
    said = decode_heartbeat(room.head, key="east")
    assert (said.reason, said.unreachable, said.nodes) == (ROOM_TOO_LARGE, room.too_large, ())
    assert said.placed == ("ns/a", "ns/b")  # dispatch holds still end
    assert reached(said)
    # Even the placed workloads do not fit: the reason alone.
    many = msgspec.structs.replace(capacity, placed=tuple(f"ns/w{i}" for i in range(5000)))
    room = encode_room(many, max_bytes=max_bytes)
    assert len(room.head) < max_bytes
    assert decode_heartbeat(room.head, key="east").placed == ()


def test_a_heartbeat_naming_another_cluster_than_its_key_is_refused_naming_both() -> None:
    """A worker may write its own keys only: the body's cluster must be the key's."""
    west = msgspec.json.encode(ClusterCapacity(cluster="west", nodes=cluster(1).nodes))
    with pytest.raises(msgspec.ValidationError, match=r"\$\.cluster: 'west' is not 'east'"):
        decode_heartbeat(west, key="east")
    long = msgspec.json.encode(ClusterCapacity(cluster="w" * 10_000))
    with pytest.raises(msgspec.ValidationError) as refused:
        decode_heartbeat(long, key="east")
    assert len(str(refused.value)) < 300
