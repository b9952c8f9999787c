"""The errors every ClusterBackend raises, so nothing outside `muster.cluster` catches a nats or
kubernetes exception. Shells map `temporary` errors to `Retry` and the rest to `Reject`.
"""

from __future__ import annotations

from collections.abc import Sequence


class ClusterError(Exception):
    """A cluster operation failed; str() names the object and what went wrong.

    `obj` is "Pod/ml/train-0"-style (or "" when no one object is concerned), `reason` a short
    CamelCase word ("Unavailable", "Conflict", "NotFound", "Invalid", "BindConflict").
    `temporary` says whether retrying later may succeed (a shell maps it to `Retry`).
    """

    def __init__(self, obj: str, reason: str, message: str, *, temporary: bool = False) -> None:
        super().__init__(f"{obj}: {message}" if obj else message)
        self.obj = obj
        self.reason = reason
        self.message = message
        self.temporary = temporary


class NotFoundError(ClusterError):
    """The object does not exist."""

    def __init__(self, obj: str) -> None:
        super().__init__(obj, "NotFound", "not found")


class ConflictError(ClusterError):
    """An optimistic-concurrency write lost: the object changed (or appeared) since it was read."""

    def __init__(self, obj: str, message: str = "changed since it was read") -> None:
        super().__init__(obj, "Conflict", message, temporary=True)


class ExpiredError(ClusterError):
    """A watch cannot resume where asked: what changed since is forgotten (Kubernetes' 410
    Gone for a compacted resourceVersion; the sim after pruning pod tombstones). The caller
    lists again, and drops what it holds that the list no longer has: deletions in the gap
    are not shown."""

    def __init__(self, obj: str, message: str) -> None:
        super().__init__(obj, "Expired", message, temporary=True)


class InvalidObjectError(ClusterError):
    """A manifest the cluster refuses; `problems` holds one line per problem (with field paths)."""

    def __init__(self, obj: str, problems: Sequence[str]) -> None:
        super().__init__(obj, "Invalid", "; ".join(problems))
        self.problems = tuple(problems)


class BindConflictError(ClusterError):
    """The pod is already bound to a different node."""

    def __init__(self, obj: str, *, bound_to: str, wanted: str) -> None:
        super().__init__(
            obj,
            "BindConflictError",
            f'already bound to node "{bound_to}", cannot bind to "{wanted}"',
        )
        self.bound_to = bound_to
        self.wanted = wanted


class RequestsRefusedError(ClusterError):
    """The cluster will not run the workload with the requests its admission covers: a Job's
    pod template whose resources the API server refuses to change (before Kubernetes v1.36, or
    with `MutablePodResourcesForSuspendedJobs` off), or cannot be made to ask for exactly those.
    Nothing was started."""

    def __init__(self, obj: str, message: str) -> None:
        super().__init__(obj, "RequestsRefused", message)


class PodSetUpdateConflictError(ClusterError):
    """A Ready admission check asks the pods for a label, annotation or nodeSelector value
    other than the one they have: Kueue's job framework fails the workload at start
    (FailedToStart) rather than choose. Nothing was started."""

    def __init__(self, obj: str, message: str) -> None:
        super().__init__(obj, "FailedToStart", message)
