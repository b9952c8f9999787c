"""A reader's pace per cluster (`muster.core.heartbeat_pace`): a flood of one cluster's
heartbeats is taken at most once per gap, the latest kept, with its parts; another cluster's
comes at once."""

from __future__ import annotations

from muster.core.heartbeat_pace import HeartbeatPace


def test_a_flood_of_heads_is_taken_once_per_gap_and_the_latest_is_kept() -> None:
    pace = HeartbeatPace(gap_s=0.25)
    assert pace.heard("east", b"1", now_s=10.0) == [("east", b"1")]

    taken = [pace.heard("east", str(n).encode(), now_s=10.0 + n / 1024) for n in range(2, 256)]

    assert all(t == [] for t in taken)  # 254 puts within the gap: none decoded yet
    assert pace.due_in(10.125) == 0.125
    assert pace.due(10.125) == []
    assert pace.due(10.25) == [("east", b"255")]  # only the latest
    assert pace.due_in(10.25) is None


def test_parts_wait_for_their_head_and_come_before_it() -> None:
    pace = HeartbeatPace(gap_s=0.1)
    assert pace.heard("east.part.0", b"p0", now_s=1.0) == []
    assert pace.heard("east.part.1", b"p1", now_s=1.0) == []
    assert pace.due_in(1.0) is None  # no head: nothing to come back for

    assert pace.heard("east", b"h", now_s=1.0) == [
        ("east.part.0", b"p0"),
        ("east.part.1", b"p1"),
        ("east", b"h"),
    ]
    pace.heard("east.part.1", b"p1'", now_s=1.01)
    pace.heard("east", b"h'", now_s=1.02)
    pace.heard("east.part.1", b"p1''", now_s=1.03)  # a later heartbeat's part, its head to come
    assert pace.due(1.1) == [("east", b"h'"), ("east.part.1", b"p1''")]


def test_each_cluster_has_its_own_pace() -> None:
    pace = HeartbeatPace(gap_s=0.1)
    pace.heard("east", b"e1", now_s=1.0)
    assert pace.heard("east", b"e2", now_s=1.01) == []
    assert pace.heard("west", b"w1", now_s=1.01) == [("west", b"w1")]  # not behind east's flood
    assert pace.heard("east", None, now_s=1.05) == []  # a deletion is the latest too
    assert pace.due(1.1) == [("east", None)]
