"""How a handler or the bus says what went wrong: `Retry` (temporary) or `Reject` (permanent).

The consume loop maps them: `Retry` naks the message for redelivery after `delay_s`, `Reject`
copies it to `MUSTER_DLQ` and terminates it. `Conflict` is what a fenced publish raises when
another writer got there first (a publish, or a key-value create or update).

Services never see nats-py's errors: what the bus does for them (buckets, objects, leases,
ordered consumption, stream facts) raises `Unavailable` when NATS failed or did not answer,
`NotFound` when what was asked for is not there, `Conflict` when a compare-and-set lost.
`wrapped` is how the bus turns one into the other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import nats.errors
import nats.js.errors


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


class Unavailable(BusError):  # noqa: N818 (an outcome, like Retry)
    """NATS failed or did not answer (down, reconnecting, timed out, an API error): temporary
    as far as the caller can tell, so it is retried or reported, never dead-lettered."""


class NotFound(BusError):  # noqa: N818 (an outcome, like Retry)
    """What was asked for (a consumer, an object, a bucket) is not there."""


# JetStream's err_codes of a write whose Nats-Expected-Last-*-Sequence is no longer the last.
_WRONG_LAST_SEQUENCE = (10071, 10164)


@contextlib.contextmanager
def wrapped(what: str, *, subject: str = "", expected: int = 0) -> Iterator[None]:
    """Raise each nats-py failure inside as the bus's own: a lost compare-and-set as
    `Conflict(subject, expected)`, a missing thing as `NotFound`, the rest (and a timeout) as
    `Unavailable`; `what` says what was being done, for the message."""
    try:
        yield
    except nats.js.errors.KeyWrongLastSequenceError as exc:
        raise Conflict(subject or what, expected) from exc
    except nats.js.errors.NotFoundError as exc:  # buckets, keys, objects, consumers, streams
        raise NotFound(f"{what}: not found") from exc
    except nats.js.errors.APIError as exc:
        if exc.err_code in _WRONG_LAST_SEQUENCE:  # a fenced publish that lost (not nats-py's KV)
            raise Conflict(subject or what, expected) from exc
        raise Unavailable(f"{what}: {exc or repr(exc)}") from exc
    except (nats.errors.Error, TimeoutError) as exc:
        raise Unavailable(f"{what}: {exc or repr(exc)}") from exc


def refused(exc: BaseException | None) -> bool:
    """Whether `exc` (a bus error, or what it was raised from) is JetStream answering with an
    error other than "temporarily unavailable" (503): a refusal that asking again will not
    change (a bucket that cannot take the key, a limit), unlike no answer at all."""
    while exc is not None:
        if isinstance(exc, nats.js.errors.APIError):
            return not isinstance(exc, nats.js.errors.ServiceUnavailableError)
        exc = exc.__cause__
    return False


class SetupError(Exception):
    """A stream or bucket is missing or out of date, and this NATS user may not fix it (with
    per-service users only the admin may: `muster nats-setup`)."""
