"""A workload that moves between groups of one ClusterQueue (StrictFIFO's set-aside, routing) can
leave its old group listed under the key its new group is listed under; the heaps must settle
that tie without comparing the groups (they cannot be compared: the round would crash)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from muster.core.queues import PendingGroup, QueueRuntime


@dataclass
class Waiting:
    order_key: tuple[int, float, int]
    group: PendingGroup | None = None
    queue_token: int = 0
    is_queued: bool = True


def moved_between_groups(queue: QueueRuntime) -> tuple[PendingGroup, PendingGroup]:
    before = queue.groups[b"before"] = PendingGroup(queue, b"before", "lq")
    after = queue.groups[b"after"] = PendingGroup(queue, b"after", "lq")
    w = Waiting((0, 1.0, 7))
    w.group = before
    before.push(cast(Any, w))
    queue.list_group(before)  # listed under w's key, token 1
    w.group = after  # w moves on; `before`'s entry stays until a round pops it
    after.push(cast(Any, w))
    queue.list_group(after)  # the same key, token 1
    return before, after


def test_a_group_listed_under_another_groups_key_is_found_not_compared() -> None:
    queue = QueueRuntime("cq", cast(Any, None), cast(Any, None))
    _, after = moved_between_groups(queue)
    assert queue.best_group() is after
