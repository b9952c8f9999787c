"""Gang-permit's view of its cluster: one watch of the backend (`selection="placement"`: the
simulated store, or the API server's nodes, the pods to place and every bound pod), decoded into
api objects.

Nodes, Pods, scheduling.k8s.io Workloads, PodGroups, CompositePodGroups, scheduler-plugins'
PodGroups and PriorityClasses are decoded once per
change (`muster.api`) and handed to a `Sink` (the gangpermit state) as they are now, or as they
were when deleted. A pod whose metadata and spec did not change but for `spec.nodeName` (a
bind) or whose status changed (the kubelet) is not decoded again: its node and phase are put
into the pod decoded before. `sync` waits until the watch has shown every write made before the
call, so a first pass sees the whole cluster. An object that does not decode, or that the sink
cannot take, is left out and dead-lettered (`bus.poison`) with why; its next change is tried
again. One that does not decode is dead-lettered once per generation and problems (a Node's
status changes every few seconds), and a Node gets a Warning Event naming the field (`warn`):
the watcher tells the other kinds' users, and does not watch Nodes. A watch that cannot resume
(`ExpiredError`: a compacted resourceVersion, pruned sim tombstones) lists again, and what the
list no longer has is taken out of the sink: a pod deleted in the gap holds no room.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import msgspec

from muster.api import decode_documents
from muster.api.model import (
    CompositePodGroup,
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    SchedulingPodGroup,
    SchedulingWorkload,
)
from muster.api.raw import RawPodStatus
from muster.bus.cancel import raise_if_cancelling
from muster.bus.poison import Quarantine
from muster.cluster.backend import ClusterBackend, ClusterChange
from muster.cluster.errors import ClusterError, ExpiredError
from muster.cluster.keys import NODE_PREFIX, PLACEMENT_PREFIXES, POD_PREFIX
from muster.cluster.refusals import Refusals
from muster.gangpermit.cluster_state import ClusterObject

log = logging.getLogger(__name__)

_RETRY_S = 1.0  # a watch that failed is resumed after this long
YIELD_EVERY = 256  # changes applied between turns given to the rest of the loop
# Keys of the objects placement reads (both backends key changes alike); everything else is
# skipped undecoded (the simulated cluster does not even deliver it).
WATCHED_PREFIXES = PLACEMENT_PREFIXES

CachedObject = ClusterObject  # what the state takes is what the cache keeps
_CACHED = (
    Node,
    Pod,
    SchedulingWorkload,
    PodGroup,
    SchedulingPodGroup,
    CompositePodGroup,
    PriorityClass,
)
# Metadata every write changes (Kubernetes): not part of what a pod decodes to.
_WRITE_META = frozenset({"resourceVersion", "managedFields"})


class _Known(NamedTuple):
    """What the sink holds for one key, and for a pod what its decode read (`_pod_basis`)."""

    obj: CachedObject
    basis: object = None


# Tells the user why an object was refused, on the object (a Kubernetes Event).
Warn = Callable[[dict[str, Any], str], None]


class Sink(Protocol):
    def put(self, obj: CachedObject) -> bool:
        """Take `obj` as it is now; whether a scheduling pass may now decide differently."""
        ...

    def remove(self, obj: CachedObject) -> None: ...


class ClusterCache:
    """Follows one cluster's backend into a `Sink`. Run `run()` in a task; `on_change` is
    called after each change handed on that may change a decision (the service wakes its
    passes)."""

    def __init__(
        self,
        backend: ClusterBackend,
        *,
        sink: Sink,
        on_change: Callable[[], None] = lambda: None,
        quarantine: Quarantine | None = None,
        warn: Warn | None = None,
    ) -> None:
        self._backend = backend
        self._sink = sink
        self._on_change = on_change
        self._quarantine = quarantine
        self._warn = warn
        self._refusals = Refusals()
        self._objects: dict[str, _Known] = {}  # by change key: what the sink holds
        self.refused: list[tuple[ClusterChange, str]] = []  # not decoded: to dead-letter
        self.revision = 0  # the watch has shown every change up to here
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []  # (revision, woken there)
        self._expired = False  # the last watch could not resume: list again
        # While listing again: the keys the list showed so far, and the revision at which
        # it has shown every object there is (what it has not shown by then is gone).
        self._listed: set[str] | None = None
        self._list_until = 0
        self.relists = 0

    async def run(self) -> None:
        """Follow the cluster until cancelled; a failed watch resumes after the last revision,
        or lists again when that revision expired (`_relist`)."""
        while True:
            start = 0 if self._expired else self.revision
            if self._expired:
                self._relist()
            changes = self._backend.watch(
                from_revision=start,
                selection="placement",
                on_progress=self._read_up_to,
                lists_again=True,
            )
            try:
                async with contextlib.aclosing(changes):
                    applied = 0
                    async for change in changes:
                        if self._listed is not None and not self._list_until:
                            # Asked once the list has begun: an object there is then is shown
                            # before the watch gets past it (asked before, one written between
                            # could come after).
                            self._list_until = await self._backend.current_revision(
                                selection="placement"
                            )
                        applied += 1
                        if applied % YIELD_EVERY == 0:
                            # Changes already arrived come without a wait: a 10 000-pod Job's
                            # would hold the loop (health answers, events) until all are in.
                            await asyncio.sleep(0)
                        try:
                            self.apply(change)
                        except Exception as err:  # poison: one object never stops the watch
                            await self._poisoned(change, err)
                        while self.refused:
                            await self._dead_letter(*self.refused.pop(0))
                        self._read_up_to(change.revision)
            except ExpiredError as err:
                log.warning("cluster watch cannot resume, listing again: %s", err)
                self._expired = True
            except ClusterError as err:
                raise_if_cancelling()  # a timeout may have swallowed it (bus.cancel)
                log.warning("cluster watch failed, resuming: %s", err)
                # A list cut short has not shown everything: it is done again whole.
                self._expired = self._listed is not None
                await asyncio.sleep(_RETRY_S)

    def _relist(self) -> None:
        """Watch from 0 again: deletions in the gap are not shown (as after a Kubernetes 410
        Gone), so what the cache holds that the list has not shown by the revision current
        once it began (`_list_until`) is taken out then (`_drop_unlisted`), its room freed."""
        self._listed = set()
        self._list_until = 0  # asked once the list has begun (`run`)
        self._expired = False
        self.relists += 1

    def _drop_unlisted(self) -> None:
        listed, self._listed = self._listed or set(), None
        gone = sorted(set(self._objects) - listed)
        for key in gone:
            self._sink.remove(self._objects.pop(key).obj)
        if gone:
            log.info("%d objects gone while the watch was away", len(gone))
            self._on_change()

    async def sync(self, *, timeout_s: float = 5.0) -> None:
        """Return once the cache holds every write made before this call (ClusterError if the
        watch does not get there within `timeout_s`)."""
        target: int | None = None
        waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout_s):
                target = await self._backend.current_revision(selection="placement")
                if self.revision >= target:
                    return
                self._waiters.append((target, waiter))
                await waiter
        except TimeoutError:
            behind = "" if target is None else f", behind {target}"
            raise ClusterError(
                "",
                "Unavailable",
                f"cluster watch at revision {self.revision}{behind} after {timeout_s:g}s",
                temporary=True,
            ) from None
        finally:
            if target is not None and (target, waiter) in self._waiters:
                self._waiters.remove((target, waiter))

    def apply(self, change: ClusterChange) -> None:
        """Hand one change on to the sink (a watched kind only)."""
        key = change.key
        if self._listed is not None:
            self._listed.add(key)
        if not key.startswith(WATCHED_PREFIXES):
            return
        if change.type == "DELETED":
            self._refusals.taken(key)
            gone = self._objects.pop(key, None)
            if gone is None:
                return
            self._sink.remove(gone.obj)
        else:
            known = self._decoded(key, change.obj)
            if isinstance(known, str):  # it does not decode: left out, dead-lettered by `run`
                self.refused.append((change, known))
                gone = self._objects.pop(key, None)
                if gone is not None:
                    self._sink.remove(gone.obj)
                return
            self._refusals.taken(key)
            self._objects[key] = known
            if not self._sink.put(known.obj):
                return
        self._on_change()

    async def _poisoned(self, change: ClusterChange, err: Exception) -> None:
        """`change` made the sink raise: take out what it holds of the object, dead-letter it."""
        gone = self._objects.pop(change.key, None)
        if gone is not None:
            try:
                self._sink.remove(gone.obj)
            except Exception as again:  # logged: the watch goes on
                log.warning("cannot take out %s: %r", change.key, again)
        await self._dead_letter(change, err)
        self._on_change()

    async def _dead_letter(self, change: ClusterChange, why: Exception | str) -> None:
        if isinstance(why, str):  # the problems it was refused for: told once
            if not self._refusals.first(change, why):
                return
            if self._warn is not None and change.key.startswith(NODE_PREFIX):
                self._warn(change.obj, why)
        if self._quarantine is not None:
            await self._quarantine.object(change.key, change.obj, why, revision=change.revision)
        else:
            log.warning("skipping %s: %s", change.key, why)

    def _decoded(self, key: str, raw: dict[str, Any]) -> _Known | str:
        """The object at `key` now: a pod from its earlier decode when only its node or status
        changed, else decoded afresh (what is wrong with it when it does not decode)."""
        if not key.startswith(POD_PREFIX):
            obj = _decoded(raw)
            return obj if isinstance(obj, str) else _Known(obj)
        basis = _pod_basis(raw)
        before = self._objects.get(key)
        if basis is not None and before is not None and before.basis == basis:
            rebound = _rebound(before.obj, raw)
            if rebound is not None:
                return _Known(rebound, basis)
        obj = _decoded(raw)
        return obj if isinstance(obj, str) else _Known(obj, basis)

    def _read_up_to(self, revision: int) -> None:
        if self._listed is not None and self._list_until and revision >= self._list_until:
            self._drop_unlisted()  # before a sync waiting for this revision returns
        if revision <= self.revision:
            return
        self.revision = revision
        if self._waiters:
            done = [(r, w) for r, w in self._waiters if r <= revision]
            for item in done:
                self._waiters.remove(item)
                if not item[1].done():
                    item[1].set_result(None)


def _pod_basis(raw: dict[str, Any]) -> object:
    """What a pod decodes from besides its node and status (None: not a well-formed object)."""
    meta, spec = raw.get("metadata"), raw.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return None
    return (
        raw.get("apiVersion"),
        raw.get("kind"),
        {k: v for k, v in meta.items() if k not in _WRITE_META},
        {k: v for k, v in spec.items() if k != "nodeName"},
    )


def _rebound(before: CachedObject, raw: dict[str, Any]) -> Pod | None:
    """Pod `before` with the node and phase of `raw` (same basis); None when those would not
    decode (then the whole pod is decoded, to report why)."""
    node = raw["spec"].get("nodeName", "")
    if not isinstance(before, Pod) or not isinstance(node, str):
        return None
    try:
        status = msgspec.convert(raw.get("status", {}), RawPodStatus)
    except msgspec.ValidationError:
        return None
    return msgspec.structs.replace(before, node_name=node, phase=status.phase)


def _decoded(obj: dict[str, Any]) -> CachedObject | str:
    """The api object `obj` stores, or what is wrong with it."""
    objects, errors = decode_documents([obj], names_checked=True)
    if errors or len(objects) != 1 or not isinstance(objects[0], _CACHED):
        return "; ".join(str(e) for e in errors) or "not a cluster object"
    return objects[0]
