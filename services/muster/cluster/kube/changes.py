"""What the merged watch has shown per key, deciding what each list or watch event means.

Shared by every source of `informer` (producer side): an event older than what was shown is
dropped, so no state is shown twice even when two selections (the two pod sources) report the
same change, and a relist after `410 Gone` shows only differences (DELETED for what vanished).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from muster.cluster.backend import ChangeType
from muster.cluster.kube.resources import Source, change_key

_TOMBSTONE_LIMIT = 10_000  # past this, tombstones no watch can still contradict are dropped


class Pending(NamedTuple):
    """A change to show, before the merged watch gives it a revision."""

    kind: str
    type: ChangeType
    key: str
    obj: dict[str, Any]


class _Known:
    __slots__ = ("obj", "rv", "sources")

    def __init__(self, obj: dict[str, Any], rv: int, source: int) -> None:
        self.obj = obj
        self.rv = rv
        self.sources = {source}


def resource_version(obj: Mapping[str, Any]) -> int:
    """metadata.resourceVersion as an int (0 when absent or not a number)."""
    meta = obj.get("metadata")
    text = meta.get("resourceVersion", "") if isinstance(meta, Mapping) else ""
    try:
        return int(text)
    except (TypeError, ValueError):
        return 0


def matches(source: Source, obj: Mapping[str, Any]) -> bool:
    """Whether `obj` is in `source`'s selection, for the selector forms `watched_sources` uses:
    labels "key" (exists) or "key=value", fields "a.b=value" or "a.b!=value"; terms joined by
    ","."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    for term in filter(None, source.label_selector.split(",")):
        key, has_value, value = term.partition("=")
        if key not in labels or (has_value and labels[key] != value):
            return False
    for term in filter(None, source.field_selector.split(",")):
        path, _, value = term.partition("=")
        negated = path.endswith("!")
        found: Any = obj
        for part in path.removesuffix("!").split("."):
            found = found.get(part) if isinstance(found, Mapping) else None
        if (str(found if found is not None else "") == value) == negated:
            return False
    return True


class ChangeCache:
    """The last state shown per key, which sources hold it, and recent deletions."""

    def __init__(self, sources: Sequence[Source], *, floor: Callable[[], int]) -> None:
        self._sources = sources
        self._floor = floor  # the lowest progress of any source: older tombstones are moot
        self._known: dict[str, _Known] = {}
        self._keys: list[set[str]] = [set() for _ in sources]
        self._tombstones: dict[str, int] = {}  # key → resourceVersion of its deletion
        # Keys never shown, reported DELETED by some of the sources that may hold them.
        self._partial: dict[str, tuple[int, set[int]]] = {}
        self.max_rv = 0  # the highest resourceVersion any source reported

    def upsert(self, source: int, obj: dict[str, Any]) -> Pending | None:
        """`obj` is in `source` now (ADDED, MODIFIED, or listed): the change to show, if any."""
        resource = self._sources[source].resource
        key, rv = change_key(resource, obj), resource_version(obj)
        self.max_rv = max(self.max_rv, rv)
        entry = self._known.get(key)
        if entry is None:
            # Older than its deletion: stale. As old as it: the same change seen by another
            # selection, which still holds the object (a deletion has a version of its own).
            if self._tombstones.get(key, -1) > rv:
                return None
            self._tombstones.pop(key, None)
            self._partial.pop(key, None)
            self._known[key] = _Known(obj, rv, source)
            self._keys[source].add(key)
            return Pending(resource.key_kind, "ADDED", key, obj)
        entry.sources.add(source)
        self._keys[source].add(key)
        if rv <= entry.rv:
            return None  # shown already (the other pod source, or a replay)
        entry.obj, entry.rv = obj, rv
        return Pending(resource.key_kind, "MODIFIED", key, obj)

    def remove(self, source: int, obj: dict[str, Any]) -> Pending | None:
        """`obj` left `source` (DELETED): DELETED to show once no source holds it any more.

        A key shown before is held by the sources that reported it. One this watch never
        showed (a resumed watch) is held by every other source whose selection `obj` matches,
        until each reports its DELETED (a real deletion) or one reports it present (it only
        left this selection).
        """
        resource = self._sources[source].resource
        key, rv = change_key(resource, obj), resource_version(obj)
        self.max_rv = max(self.max_rv, rv)
        self._keys[source].discard(key)
        entry = self._known.get(key)
        if entry is not None:
            entry.sources.discard(source)
            if entry.sources:
                return None  # another selection still holds it and reports the rest
        elif self._tombstones.get(key, -1) >= rv:
            return None  # shown deleted already
        else:
            waiting = self._partial.get(key)
            reported = (waiting[1] if waiting is not None and waiting[0] == rv else set()) | {
                source
            }
            if any(i not in reported for i in self._matching(resource.key_kind, obj)):
                self._partial[key] = (rv, reported)
                return None
            self._partial.pop(key, None)
        self._forget(key)
        self._tombstones[key] = rv
        if len(self._tombstones) > _TOMBSTONE_LIMIT:
            floor = self._floor()
            self._tombstones = {k: v for k, v in self._tombstones.items() if v > floor}
            self._partial = {k: v for k, v in self._partial.items() if v[0] > floor}
        return Pending(resource.key_kind, "DELETED", key, obj)

    def vanished(self, source: int, present: set[str]) -> list[Pending]:
        """After a relist of `source`: DELETED for what it held that is not in `present`."""
        gone = self._keys[source] - present
        out = []
        for key in sorted(gone):
            entry = self._known.get(key)
            if entry is None:
                self._keys[source].discard(key)
                continue
            pending = self.remove(source, entry.obj)
            if pending is not None:
                out.append(pending)
        return out

    def _matching(self, key_kind: str, obj: Mapping[str, Any]) -> list[int]:
        return [
            i
            for i, s in enumerate(self._sources)
            if s.resource.key_kind == key_kind and matches(s, obj)
        ]

    def _forget(self, key: str) -> None:
        entry = self._known.pop(key, None)
        if entry is not None:
            for source in entry.sources:
                self._keys[source].discard(key)
