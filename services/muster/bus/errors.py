"""How a handler or the bus says what went wrong: `Retry` (temporary) or `Reject` (permanent).

The consume loop maps them: `Retry` naks the message for redelivery after `delay_s`, `Reject`
copies it to `MUSTER_DLQ` and terminates it. `Conflict` is what a fenced publish raises when
another writer got there first.
"""

from __future__ import annotations


class BusError(Exception):
    """Base class of the errors `muster.bus` raises."""


class Retry(BusError):  # noqa: N818 (the spec names them; they are outcomes, not only errors)
    """A temporary failure: try again after `delay_s` seconds (NATS timeout, API-server 429/5xx)."""

    def __init__(self, delay_s: float = 1.0, reason: str = "temporary failure") -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay_s = max(0.0, delay_s)

    def __str__(self) -> str:
        return f"{self.reason} (retry in {self.delay_s:g}s)"


class Reject(BusError):  # noqa: N818 (the spec names them; they are outcomes, not only errors)
    """A permanent failure: the message can never be handled (undecodable, oversized, unknown)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class Conflict(BusError):  # noqa: N818 (the spec names them; they are outcomes, not only errors)
    """A publish fenced with `expected_last_subject_sequence` lost: another writer came first."""

    def __init__(self, subject: str, expected: int) -> None:
        super().__init__(f"{subject}: last sequence is no longer {expected}")
        self.subject = subject
        self.expected = expected


class SetupError(Exception):
    """A stream or bucket is missing or out of date, and this NATS user may not fix it (with
    per-service users only the admin may: `muster nats-setup`)."""
