"""Which errors make a service's start wait for NATS and start again (`nats_outage`), and which
end the process: NATS not answering, as the bus and nats-py raise it, against everything else."""

from __future__ import annotations

import asyncio

import nats.errors
import nats.js.errors
import pytest

from muster.bus.connection import nats_outage
from muster.bus.errors import Reject, Retry, Unavailable, wrapped
from muster.bus.lease import LeaseLostError


def raised(exc: BaseException, *, within: str = "consumer admission-0") -> BaseException:
    """`exc` as the bus raises it from a NATS call (`wrapped`)."""
    try:
        with wrapped(within):
            raise exc
    except BaseException as outer:  # the error is the result
        return outer
    raise AssertionError("wrapped raised nothing")


def lost_lease() -> LeaseLostError:
    try:
        raise LeaseLostError("lease admission.0 not renewed for a TTL") from raised(
            nats.errors.TimeoutError()
        )
    except LeaseLostError as exc:
        return exc


@pytest.mark.parametrize(
    ("exc", "outage"),
    [
        (nats.errors.TimeoutError(), True),
        (TimeoutError(), True),
        (nats.errors.ConnectionReconnectingError(), True),
        (raised(nats.errors.TimeoutError()), True),  # Unavailable from no answer
        (raised(nats.errors.ConnectionClosedError()), True),
        (Retry(1.0, "no PubAck for muster.v1.local.workload.admitted within 5s"), True),
        (raised(nats.js.errors.APIError(code=400, err_code=10012)), False),  # an answer: no
        (raised(nats.js.errors.NotFoundError()), False),
        (Unavailable("refused"), False),  # no cause: nothing says NATS was away
        (lost_lease(), False),  # fencing, whatever caused it
        (Reject("undecodable"), False),
        (ValueError("a bug"), False),
    ],
)
def test_an_error_is_an_outage_only_when_nats_did_not_answer(
    exc: BaseException, outage: bool
) -> None:
    assert nats_outage(exc) is outage


def test_a_task_group_is_an_outage_when_each_of_its_errors_is() -> None:
    timeout = raised(nats.errors.TimeoutError())
    assert nats_outage(BaseExceptionGroup("loops", [timeout, asyncio.CancelledError()]))
    nested = BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [timeout])])
    assert nats_outage(nested)
    assert not nats_outage(BaseExceptionGroup("loops", [timeout, lost_lease()]))
    assert not nats_outage(BaseExceptionGroup("loops", [asyncio.CancelledError()]))
