"""A Kueue Workload's `status.admissionChecks`: the list muster and the admission check
controllers share, as the JSON the API server stores. Pure (`now` comes in).

Kueue's contract (pkg/workload, pkg/controller/core): when quota is reserved, the workload
controller lists the ClusterQueue's checks (a missing one added as Pending, one no longer
required dropped); each check's controller sets its own entry Ready, Retry or Rejected with a
message; an eviction resets every entry that is not Pending back to Pending ("Reset to Pending
after eviction. Previously: Ready"), counting a Retry in `retryCount`. Every write of the list
is a read-modify-write under the object's resourceVersion, so nobody's entry is lost.
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

PENDING, READY, RETRY, REJECTED = "Pending", "Ready", "Retry", "Rejected"
CHECK_STATES = (PENDING, READY, RETRY, REJECTED)
RESET_MESSAGE = "Reset to Pending after eviction. Previously: "

Entry = dict[str, Any]


class AnsweredCheck(msgspec.Struct, frozen=True):
    """The state of a check muster itself answers (MultiKueue's: admission dispatches)."""

    name: str
    state: str
    message: str = ""


class ChecksWanted(msgspec.Struct, frozen=True, kw_only=True):
    """What muster wants of one Workload's check list: the checks its reservation requires,
    when it was last evicted (entries set then or before are reset to Pending), and the
    answers of the checks muster is the controller of (`answers`, set in their entries)."""

    names: tuple[str, ...]
    evicted_at_s: float = 0.0  # 0: never evicted
    answers: tuple[AnsweredCheck, ...] = ()


def format_time(seconds: float) -> str:
    """metav1.Time: RFC 3339 in UTC, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def parse_time(text: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 UTC time ("...Z"), or None when unreadable."""
    if not isinstance(text, str):
        return None
    try:
        parsed = time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return float(calendar.timegm(parsed))


def entries_of(status: Mapping[str, Any] | None) -> list[Entry]:
    """The check entries of a Workload status (copies; malformed items left out)."""
    raw = (status or {}).get("admissionChecks")
    if not isinstance(raw, list):
        return []
    return [dict(e) for e in raw if isinstance(e, dict) and isinstance(e.get("name"), str)]


def find(entries: Iterable[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((e for e in entries if e.get("name") == name), None)


def set_state(
    entries: Sequence[Mapping[str, Any]],
    name: str,
    state: str,
    *,
    now: str,
    message: str = "",
    **fields: Any,
) -> list[Entry]:
    """`entries` with check `name` in `state` (added when missing), as Kueue's
    SetAdmissionCheckState: lastTransitionTime moves only when the state changes; the
    message and every field in `fields` (camelCase: podSetUpdates, requeueAfterSeconds,
    retryCount) are replaced, a field given as None removed."""
    out = [dict(e) for e in entries]
    entry = next((e for e in out if e.get("name") == name), None)
    if entry is None:
        entry = {"name": name}
        out.append(entry)
    if entry.get("state") != state or "lastTransitionTime" not in entry:
        entry["lastTransitionTime"] = now
    entry["state"] = state
    entry["message"] = message
    for field, value in fields.items():
        if value is None:
            entry.pop(field, None)
        else:
            entry[field] = value
    return out


def sync_required(
    entries: Sequence[Mapping[str, Any]], names: Iterable[str], *, now: str
) -> list[Entry]:
    """The entries a reservation requiring checks `names` has: those present kept as they
    are, the missing ones added Pending, the others dropped; sorted by name."""
    wanted = set(names)
    out = [dict(e) for e in entries if e.get("name") in wanted]
    present = {e["name"] for e in out}
    out += [
        {"name": n, "state": PENDING, "lastTransitionTime": now, "message": ""}
        for n in sorted(wanted - present)
    ]
    return sorted(out, key=lambda e: str(e["name"]))


def reset_after_eviction(
    entries: Sequence[Mapping[str, Any]], *, evicted_at_s: float, now: str
) -> list[Entry]:
    """`entries` with each one that is not Pending and was set at or before the eviction
    (`evicted_at_s`, whole seconds as lastTransitionTime has them) reset to Pending; a
    Retry counts one more retry, a Ready or Rejected starts the count over
    (`core.check_retries`). Entries set after it are a newer reservation's: kept."""
    if evicted_at_s <= 0:
        return [dict(e) for e in entries]
    evicted = evicted_at_s if math.isinf(evicted_at_s) else float(int(evicted_at_s))
    out = []
    for e in entries:
        entry = dict(e)
        set_at = parse_time(entry.get("lastTransitionTime"))
        state = entry.get("state")
        if state != PENDING and (set_at is None or set_at <= evicted):
            if state == RETRY:
                entry["retryCount"] = int(entry.get("retryCount") or 0) + 1
            else:  # a Ready or Rejected starts its count over (Kueue leaves it unset)
                entry.pop("retryCount", None)
            entry.pop("podSetUpdates", None)
            entry.update(state=PENDING, lastTransitionTime=now, message=f"{RESET_MESSAGE}{state}")
        out.append(entry)
    return out


def wanted_entries(
    entries: Sequence[Mapping[str, Any]],
    wanted: ChecksWanted,
    *,
    now_s: float,
    written: ChecksWanted | None,
) -> list[Entry]:
    """The check list muster writes for `wanted` over the stored `entries`, `written` being
    what the same writer last wrote (None: it does not know, e.g. it restarted).

    An eviction resets the entries once, at the first write that carries it. Until that write
    lands the next reservation is not visible, so every answer found then is an older one's:
    all are reset, as Kueue resets them in the eviction's own write. A writer that does not
    know whether its eviction was written resets only the answers set at or before it.
    """
    now = format_time(now_s)
    out = sync_required(entries, wanted.names, now=now)
    if wanted.evicted_at_s > 0 and (written is None or written.evicted_at_s != wanted.evicted_at_s):
        evicted_at_s = math.inf if written is not None else wanted.evicted_at_s
        out = reset_after_eviction(out, evicted_at_s=evicted_at_s, now=now)
    for answer in wanted.answers:
        if answer.name in wanted.names:
            out = set_state(out, answer.name, answer.state, now=now, message=answer.message)
    return out
