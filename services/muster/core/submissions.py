"""Which submissions have ended: the binder's and gang-permit's guard against a decision about a
workload that finished or was deleted, stored after its name was submitted again. Pure.

Admission names the `submitted` each decision is about (`Envelope.submitted_id`, docs/events.md
"A name used again"). A replica may decide about a workload before it reads its deletion and
store the decision after; a reader that knows that `submitted` ended drops the decision, so
it never starts, holds or stops the pods of a new workload of the same name.
"""

from __future__ import annotations

from typing import Final

ENDED_KEPT: Final = 200_000  # ids remembered: a late decision names one within minutes


class EndedSubmissions:
    """The ids of the `submitted` events of workloads that ended, the newest `kept`, and those
    of the workloads not ended yet (to be moved over when they end)."""

    def __init__(self, *, kept: int = ENDED_KEPT) -> None:
        self.kept = kept
        self._open: dict[str, list[str]] = {}  # workload -> its `submitted` ids since it ended
        self._ended: dict[str, None] = {}  # ids of ended submissions, oldest first

    def __len__(self) -> int:
        return len(self._ended)

    def submitted(self, workload: str, submitted_id: str) -> None:
        """`workload` was submitted in event `submitted_id` (a resubmission adds an id)."""
        self._open.setdefault(workload, []).append(submitted_id)

    def ended(self, workload: str) -> None:
        """`workload` finished or was deleted: every submission of it since it last ended did."""
        self._ended.update(dict.fromkeys(self._open.pop(workload, ())))
        while len(self._ended) > self.kept:
            del self._ended[next(iter(self._ended))]

    def replaced(self, workload: str, submitted_id: str) -> bool:
        """Whether `submitted_id` ended and `workload` has been submitted again since: the
        pods of that name may be the new workload's."""
        return submitted_id in self and workload in self._open

    def __contains__(self, submitted_id: object) -> bool:
        """Whether a decision naming `submitted_id` is about a workload that ended since ("":
        a decision written before the field, never taken as ended)."""
        return bool(submitted_id) and submitted_id in self._ended
