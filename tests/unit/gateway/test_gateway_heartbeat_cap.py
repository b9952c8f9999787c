"""`--heartbeat-max-bytes`: a worker's heartbeat larger than the cap, head and parts counted, is
refused by every reader as a bad one is: admission's registry keeps the last good room
(`RoomReader`), the gateway's view shows the cluster Refused with the size and the cap
(`HeldRooms`, `clusters_view`); one at the cap is taken."""

from __future__ import annotations

import argparse

import msgspec
import pytest
from test_gateway_cluster_cache import NODES, heartbeat, read

from muster.bus.heartbeats import max_bytes
from muster.core.dispatch import ClusterCapacity
from muster.core.heartbeat import HEARTBEAT_REFUSED, encode, pack
from muster.core.heartbeat_parts import RoomReader, part_key
from muster.gateway.book import WorkloadBook
from muster.gateway.cluster_cache import HeldRooms
from muster.gateway.clusters import clusters_view

SMALL = encode(pack(ClusterCapacity(cluster="east", nodes=NODES[:10])))
BEAT = heartbeat(NODES)  # in parts
BEAT_BYTES = len(BEAT.head) + sum(len(p) for p in BEAT.parts)


def feed(reader: RoomReader) -> ClusterCapacity | None:
    """BEAT's parts, then its head, as a follower of the bucket hears them."""
    for n, part in enumerate(BEAT.parts):
        reader.heard(part_key("east", n), part)
    found = reader.heard("east", BEAT.head)
    assert found is None or isinstance(found, ClusterCapacity)
    return found


def test_the_registry_takes_a_heartbeat_at_the_cap_and_refuses_one_past_it() -> None:
    at_cap = feed(RoomReader(max_bytes=BEAT_BYTES))
    assert at_cap is not None
    assert len(at_cap.nodes) == len(NODES)

    with pytest.raises(msgspec.ValidationError) as refused:
        feed(RoomReader(max_bytes=BEAT_BYTES - 1))
    assert str(refused.value) == (
        f"heartbeat of cluster east: {BEAT_BYTES} bytes with its parts, over the "
        f"{BEAT_BYTES - 1} its readers take (--heartbeat-max-bytes)"
    )
    one_value = RoomReader(max_bytes=len(SMALL) - 1)
    with pytest.raises(msgspec.ValidationError, match=f"east: {len(SMALL)} bytes"):
        one_value.heard("east", SMALL)


def test_the_registry_keeps_the_last_good_room_when_a_larger_one_is_refused() -> None:
    reader = RoomReader(max_bytes=len(SMALL))
    first = reader.heard("east", SMALL)
    assert isinstance(first, ClusterCapacity)
    with pytest.raises(msgspec.ValidationError):
        feed(reader)
    assert reader.heard("east", SMALL) == first  # still held, not decoded again


def test_the_gateway_view_shows_a_heartbeat_past_the_cap_refused_with_size_and_cap() -> None:
    held = HeldRooms(max_bytes=BEAT_BYTES - 1)
    read(held, BEAT)
    room = held.room("east", BEAT.head)
    assert room is not None
    assert (room.nodes, room.capacity.reason) == ((), HEARTBEAT_REFUSED)
    assert f"{BEAT_BYTES} bytes with its parts, over the {BEAT_BYTES - 1}" in (
        room.capacity.unreachable
    )
    (view,) = clusters_view({"east": (room, 0.5)}, WorkloadBook()).clusters
    assert (view.state, view.reason) == ("Refused", HEARTBEAT_REFUSED)

    small = HeldRooms(max_bytes=len(SMALL) - 1).room("east", SMALL)
    assert small is not None
    assert small.capacity.reason == HEARTBEAT_REFUSED

    taken = HeldRooms(max_bytes=BEAT_BYTES)
    read(taken, BEAT)
    whole = taken.room("east", BEAT.head)
    assert whole is not None
    assert len(whole.nodes) == len(NODES)


@pytest.mark.parametrize("text", ["0", "-5", "lots"])
def test_the_flag_takes_a_positive_number_of_bytes(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        max_bytes(text)
    assert max_bytes("1048576") == 1048576
