"""Which cluster objects the watch refused, and for what: each refusal is dead-lettered, and
told on the object by a Warning Event, once per object generation and problem.

A refused Job is watched again at each change that does not touch its spec (the Job
controller's status, a label), and refused again for the same problems: one Warning with a
count of 1, and one dead letter, are what a user and an operator expect. Its uid, generation
and problems are remembered until it is taken, deleted or forgotten (the oldest, past
`_REMEMBERED` objects: at worst told once more).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muster.cluster.backend import ClusterChange

_REMEMBERED = 65_536  # objects refused and not yet taken or deleted


class Refusals:
    """The last refusal of each object refused and not since taken, by change key."""

    def __init__(self, *, limit: int = _REMEMBERED) -> None:
        self._limit = limit
        self._last: dict[str, tuple[Any, Any, str]] = {}  # key -> (uid, generation, problems)

    def first(self, change: ClusterChange, problems: str) -> bool:
        """Whether `change` is refused for `problems` anew (not at the same generation of the
        same object for the same problems); remembered either way."""
        meta = change.obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        said = (meta.get("uid"), meta.get("generation"), problems)
        before = self._last.pop(change.key, None)
        self._last[change.key] = said  # the newest last, so the oldest is forgotten first
        if len(self._last) > self._limit:
            del self._last[next(iter(self._last))]
        return before != said

    def taken(self, key: str) -> None:
        """Object `key` was taken in, or deleted: a later refusal is told again."""
        self._last.pop(key, None)


# What Kueue's integrations make Workloads of: (kind, apiVersion).
_COMPOSED = frozenset({("Job", "batch/v1"), ("Pod", "v1"), ("JobSet", "jobset.x-k8s.io/v1alpha2")})


def rejected_event(obj: Mapping[str, Any], problems: str) -> dict[str, str]:
    """The Warning Event (record's keywords) on an object the watch refused for `problems`
    (one line each, naming the object and field): Kueue's ErrWorkloadCompose on a Job, JobSet
    or Pod no Workload can be made of, Invalid on any other. Kueue's webhooks refuse such objects
    when they are written; muster has none, so `kubectl describe` is where the user learns
    why nothing happens."""
    composed = (obj.get("kind"), obj.get("apiVersion")) in _COMPOSED
    return {
        "type_": "Warning",
        "reason": "ErrWorkloadCompose" if composed else "Invalid",
        "action": "Validate",
        "note": problems,
    }
