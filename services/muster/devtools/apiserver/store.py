"""The stand-in's etcd: objects per resource, one global resourceVersion, a bounded change
history, and fan-out of each change to the open watches of its resource.

Every write takes the next resourceVersion. Changes older than the history window (or
`compact()`ed) are gone: a watch or a paged list from before `compacted_rv` is answered 410.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Protocol

from muster.devtools.apiserver.errors import expired
from muster.devtools.apiserver.objects import JsonObj, ObjKey, encode, key_of, meta
from muster.devtools.apiserver.resources import ResourceType, stamp_version

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


class Change:
    """One committed write: its resourceVersion, type, the object after (for DELETED: the last
    state, stamped with the deletion's resourceVersion) and before."""

    __slots__ = ("_lines", "obj", "old", "rt", "rv", "type")

    def __init__(
        self, rv: int, rt: ResourceType, type_: str, obj: JsonObj, old: JsonObj | None
    ) -> None:
        self.rv = rv
        self.rt = rt
        self.type = type_
        self.obj = obj
        self.old = old
        self._lines: dict[tuple[str, str], bytes] = {}

    def line(self, event_type: str, version: str) -> bytes:
        """The watch event as a JSON line, encoded once per (type, version) for all watchers."""
        cached = self._lines.get((event_type, version))
        if cached is None:
            served = stamp_version(self.obj, self.rt, version)
            cached = encode({"type": event_type, "object": served}) + b"\n"
            self._lines[(event_type, version)] = cached
        return cached


class ChangeSink(Protocol):
    """An open watch: receives every change of its resource, in resourceVersion order."""

    def offer(self, change: Change) -> None: ...

    def end(self) -> None:
        """The resource went away (its CRD was deleted): finish the stream."""


def _owner_uids(obj: JsonObj | None) -> set[str]:
    if obj is None:
        return set()
    refs = meta(obj).get("ownerReferences")
    return (
        {r["uid"] for r in refs if isinstance(r, dict) and isinstance(r.get("uid"), str)}
        if isinstance(refs, list)
        else set()
    )


class Store:
    """Objects and history; all methods run on the server's event loop (no locking)."""

    def __init__(self, *, history_limit: int) -> None:
        if history_limit < 1:
            raise ValueError("history_limit must be at least 1")
        self.rv = 1  # never 0: "0" means "any version" in requests
        self.compacted_rv = 1
        self.history_limit = history_limit
        self._objects: dict[tuple[str, str], dict[ObjKey, JsonObj]] = {}
        self._history: deque[Change] = deque()
        self._sinks: dict[tuple[str, str], set[ChangeSink]] = {}
        # For the garbage collector: owner uid → dependents, and every live uid.
        self._dependents: dict[str, set[tuple[tuple[str, str], ObjKey]]] = {}
        self._uids: set[str] = set()

    def objects(self, rt: ResourceType) -> dict[ObjKey, JsonObj]:
        """The current objects of `rt` by (namespace, name); callers must not modify them."""
        return self._objects.setdefault(rt.key, {})

    def get(self, rt: ResourceType, key: ObjKey) -> JsonObj | None:
        return self._objects.get(rt.key, {}).get(key)

    def put(self, rt: ResourceType, obj: JsonObj, old: JsonObj | None) -> Change:
        """Store `obj` (owned by the store from now on) at the next resourceVersion."""
        self.rv += 1
        meta(obj)["resourceVersion"] = str(self.rv)
        key = key_of(obj)
        self.objects(rt)[key] = obj
        self._index(rt, key, old, obj)
        return self._record(Change(self.rv, rt, MODIFIED if old is not None else ADDED, obj, old))

    def remove(
        self, rt: ResourceType, old: JsonObj, *, last_state: JsonObj | None = None
    ) -> Change:
        """Delete `old` (the stored object); the DELETED event carries `last_state` (default:
        `old`) stamped with the deletion's resourceVersion."""
        self.rv += 1
        key = key_of(old)
        del self.objects(rt)[key]
        self._index(rt, key, old, None)
        last = old if last_state is None else last_state
        final = {**last, "metadata": {**meta(last), "resourceVersion": str(self.rv)}}
        return self._record(Change(self.rv, rt, DELETED, final, old))

    def _index(
        self, rt: ResourceType, key: ObjKey, old: JsonObj | None, new: JsonObj | None
    ) -> None:
        if old is not None:
            self._uids.discard(meta(old).get("uid", ""))
        if new is not None:
            self._uids.add(meta(new).get("uid", ""))
        before, after = _owner_uids(old), _owner_uids(new)
        for uid in before - after:
            self._dependents.get(uid, set()).discard((rt.key, key))
        for uid in after - before:
            self._dependents.setdefault(uid, set()).add((rt.key, key))

    def dependents(self, uid: str) -> list[tuple[tuple[str, str], ObjKey]]:
        return sorted(self._dependents.get(uid, ()))

    def exists(self, uid: str) -> bool:
        return uid in self._uids

    def _record(self, change: Change) -> Change:
        self._history.append(change)
        while len(self._history) > self.history_limit:
            self.compacted_rv = self._history.popleft().rv
        for sink in tuple(self._sinks.get(change.rt.key, ())):
            sink.offer(change)
        return change

    def compact(self, upto: int | None = None) -> None:
        """Forget the changes up to `upto` (default: all), as etcd compaction does."""
        limit = self.rv if upto is None else min(upto, self.rv)
        while self._history and self._history[0].rv <= limit:
            self._history.popleft()
        self.compacted_rv = max(self.compacted_rv, limit)

    def check_not_compacted(self, rv: int) -> None:
        if rv < self.compacted_rv:
            raise expired(f"too old resource version: {rv} ({self.compacted_rv})")

    def changes_after(self, rt: ResourceType, rv: int) -> Iterator[Change]:
        """The kept changes of `rt` after `rv`, oldest first (caller checked compaction)."""
        for change in self._history:
            if change.rv > rv and change.rt.key == rt.key:
                yield change

    def snapshot(self, rt: ResourceType, rv: int) -> dict[ObjKey, JsonObj]:
        """The objects of `rt` as they were at `rv`, undoing later changes; 410 if compacted."""
        self.check_not_compacted(rv)
        current = self.objects(rt)
        if rv >= self.rv:
            return current
        state = dict(current)
        for change in reversed(self._history):
            if change.rv <= rv:
                break
            if change.rt.key != rt.key:
                continue
            if change.type == ADDED:
                state.pop(key_of(change.obj), None)
            elif change.old is not None:
                state[key_of(change.old)] = change.old
        return state

    def subscribe(self, rt: ResourceType, sink: ChangeSink) -> None:
        self._sinks.setdefault(rt.key, set()).add(sink)

    def unsubscribe(self, rt: ResourceType, sink: ChangeSink) -> None:
        self._sinks.get(rt.key, set()).discard(sink)

    def sinks(self, rt: ResourceType | None = None) -> list[ChangeSink]:
        if rt is not None:
            return list(self._sinks.get(rt.key, ()))
        return [s for group in self._sinks.values() for s in group]
