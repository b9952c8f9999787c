"""RFC 3339 timestamps (`metadata.creationTimestamp`, `status.startTime`) to and from seconds.

Pure conversions: decoding checks timestamps with `timestamp_problem`, gang placement orders
gangs by `parse_time`, and the simulated cluster writes times with `format_time`.
"""

from __future__ import annotations

import datetime
import functools
import math
import re
from collections.abc import Mapping

from muster.api.wellknown import (
    PODS_READY_AFTER_ANNOTATION,
    PODS_UNREADY_AFTER_ANNOTATION,
    PODS_UNREADY_FOR_ANNOTATION,
    RUN_SECONDS_ANNOTATION,
)

NEVER_READY = "never"  # muster.dev/pods-ready-after: the pods never become Ready


def parse_time(text: str) -> float:
    """Return the seconds since the epoch of an RFC 3339 timestamp ("...Z" or with an offset).

    A time without an offset is taken as UTC. Raises ValueError when `text` is not a time.
    """
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def format_time(seconds: float) -> str:
    """Return an RFC 3339 UTC timestamp with microseconds: "2025-01-02T03:04:05.678901Z".

    Differs from Kubernetes' metav1.Time (whole seconds) because a sped-up simulation runs pods
    for fractions of a second, and restarts compute the time left from startTime.
    """
    # As `datetime.fromtimestamp` splits it (the fraction rounded half to even), so the text is
    # the same; the whole second's text is kept, not formatted again for every pod of it.
    fraction, whole = math.modf(seconds)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    elif micros < 0:
        whole, micros = whole - 1, micros + 1_000_000
    return f"{_whole_second(int(whole))}.{micros:06d}Z"


@functools.lru_cache(maxsize=4)
def _whole_second(seconds: int) -> str:
    """The text of a whole second, UTC ("2025-01-02T03:04:05"): 2.5 µs to format, and asked
    for by every pod made or started in that second."""
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def timestamp_problem(text: str | None) -> str | None:
    """Return the user's message when `text` is set but is not an RFC 3339 time, else None."""
    if text is None:
        return None
    try:
        parse_time(text)
    except ValueError:
        return f"must be an RFC 3339 time such as 2024-01-02T03:04:05Z, got {text!r}"
    return None


# ASCII digits only: Python's float() would read "١٢" as 12 and "1_0" as 10.
_SECONDS = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def parse_seconds(text: str) -> float | None:
    """A number of seconds written in decimal ("30", "2.5", "1e3"), or None when `text` is not
    one or is not finite. Never negative."""
    if len(text) > 64 or not _SECONDS.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def run_seconds_of(annotations: Mapping[str, str]) -> float | None:
    """Annotation muster.dev/run-seconds in seconds; None when absent or not a duration."""
    text = annotations.get(RUN_SECONDS_ANNOTATION)
    return None if text is None else parse_seconds(text)


def ready_after_seconds_of(annotations: Mapping[str, str]) -> float | None:
    """Annotation muster.dev/pods-ready-after: seconds from a pod's start until it is Ready;
    None for "never"; 0 when absent or not a duration (ready as it starts, as without it)."""
    text = annotations.get(PODS_READY_AFTER_ANNOTATION)
    if text is None:
        return 0.0
    if text.strip() == NEVER_READY:
        return None
    return parse_seconds(text) or 0.0


def readiness_changes_of(annotations: Mapping[str, str]) -> list[tuple[float, bool]]:
    """When a pod's Ready condition changes, as (seconds after its start, Ready), in order:
    Ready at muster.dev/pods-ready-after, not Ready muster.dev/pods-unready-after later, Ready
    again muster.dev/pods-unready-for after that (absent or "never": not again)."""
    ready_s = ready_after_seconds_of(annotations)
    if ready_s is None:
        return []
    changes = [(ready_s, True)]
    lost_after = annotations.get(PODS_UNREADY_AFTER_ANNOTATION)
    lost_s = parse_seconds(lost_after) if lost_after is not None else None
    if lost_s is None:
        return changes
    changes.append((ready_s + lost_s, False))
    lost_for = annotations.get(PODS_UNREADY_FOR_ANNOTATION, NEVER_READY)
    back_s = None if lost_for.strip() == NEVER_READY else parse_seconds(lost_for)
    if back_s is not None:
        changes.append((ready_s + lost_s + back_s, True))
    return changes
