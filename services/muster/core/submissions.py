"""Which submissions have ended: the binder's and gang-permit's guard against a decision about a
workload that finished or was deleted, stored after its name was submitted again. Pure.

Admission names the `submitted` each decision is about (`Envelope.submitted_id`, docs/events.md
"A name used again"). A replica may decide about a workload before it reads its deletion and
store the decision after; a reader that knows that `submitted` ended drops the decision, so
it never starts, holds or stops the pods of a new workload of the same name.
"""

from __future__ import annotations

import math
from typing import Final, TypeVar

K = TypeVar("K")

# How long an ended submission is remembered, in the stream's own time (its events' times):
# longer than a late decision can come. JetStream drops a copy published within its 120 s
# duplicate window, and a consumer redelivers an unacknowledged event for up to 20 x 30 s
# (`bus.consumer`); a decision held up longer than that would be dead-lettered first.
ENDED_KEPT_S: Final = 900.0


def check_ended_kept(seconds: float) -> None:
    """Refuse a time to keep ended submissions that is not a finite number > 0, naming the
    flag: forever would grow without bound, and NaN would keep nothing."""
    if not 0 < seconds < math.inf:
        raise ValueError(
            f"--ended-kept-seconds: ended submissions must be kept a finite number > 0 of "
            f"seconds, got {seconds:g}"
        )


class EndedSubmissions:
    """The ids of the `submitted` events of workloads that ended within the last `kept_s`
    seconds, and those of the workloads not ended yet (to be moved over when they end).

    Time is the stream's: the latest event time given (`at_s`), so every reader of the
    stream, and a replay of it, forgets the same ids at the same point. An event without a
    time (0) takes the latest one seen.
    """

    def __init__(self, *, kept_s: float = ENDED_KEPT_S) -> None:
        check_ended_kept(kept_s)
        self.kept_s = kept_s
        self._open: dict[str, list[str]] = {}  # workload -> its `submitted` ids since it ended
        self._ended: dict[str, float] = {}  # ids of ended submissions: when, oldest first
        self._now_s = 0.0  # the latest event time seen

    def __len__(self) -> int:
        return len(self._ended)

    def submitted(self, workload: str, submitted_id: str, *, at_s: float = 0.0) -> None:
        """`workload` was submitted in event `submitted_id` (a resubmission adds an id)."""
        self._open.setdefault(workload, []).append(submitted_id)
        self._advance(at_s)

    def ended(self, workload: str, *, at_s: float = 0.0) -> None:
        """`workload` finished or was deleted at `at_s`: every submission of it since it last
        ended did."""
        self._advance(at_s)
        self._ended.update(dict.fromkeys(self._open.pop(workload, ()), self._now_s))

    def _advance(self, at_s: float) -> None:
        """The stream's time is `at_s` (if later): forget what ended more than `kept_s` ago."""
        self._now_s = max(self._now_s, at_s)
        forget_older(self._ended, before_s=self._now_s - self.kept_s)

    def replaced(self, workload: str, submitted_id: str) -> bool:
        """Whether `submitted_id` ended and `workload` has been submitted again since: the
        pods of that name may be the new workload's."""
        return submitted_id in self and workload in self._open

    def __contains__(self, submitted_id: object) -> bool:
        """Whether a decision naming `submitted_id` is about a workload that ended since ("":
        a decision written before the field, never taken as ended)."""
        return bool(submitted_id) and submitted_id in self._ended


def forget_older(times: dict[K, float], *, before_s: float) -> list[K]:
    """Drop the entries of `times` (in the order of their times, oldest first) older than
    `before_s`; return their keys. The first one young enough stops the walk."""
    forgotten: list[K] = []
    while times:
        first = next(iter(times))
        if times[first] >= before_s:
            break
        del times[first]
        forgotten.append(first)
    return forgotten
