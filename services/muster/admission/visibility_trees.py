"""Which ClusterQueues changed tree between two renders of the visibility views.

A render sees the configuration only as it is: a ClusterQueue moved to another replica's tree
and back by two configuration changes in between looks as if it never left, though the other
replica may have written (and deleted) its keys meanwhile under a larger epoch. The state
notes every configuration change here; a render takes what changed and gives those queues a
new epoch (`VisibilityRenderer.render`). Pure.
"""

from __future__ import annotations

from muster.core.engine import Engine


class TreeChanges:
    """The ClusterQueues whose cohort tree changed (or which came or went) since last taken,
    told of every configuration change (`note`): a render sees the configuration only as it
    is, not a tree moved away and back between two renders. Pure."""

    def __init__(self) -> None:
        self._trees: dict[str, str | None] = {}
        self._changed: set[str] = set()

    def reset(self, engine: Engine) -> None:
        """Start from `engine`'s trees, nothing changed (ownership taken)."""
        self._trees, self._changed = self._trees_of(engine), set()

    def note(self, engine: Engine) -> None:
        """After a configuration change: each ClusterQueue's tree, compared with before."""
        trees = self._trees_of(engine)
        before, self._trees = self._trees, trees
        moved = {cq for cq in before.keys() | trees.keys() if before.get(cq) != trees.get(cq)}
        self._changed |= moved

    def take(self) -> set[str]:
        """The ClusterQueues whose tree changed since the last `take`."""
        changed, self._changed = self._changed, set()
        return changed

    @staticmethod
    def _trees_of(engine: Engine) -> dict[str, str | None]:
        return {cq: engine.tree_of_cluster_queue(cq) for cq in engine.cluster_queue_names()}
