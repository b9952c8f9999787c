"""Trace context across publish → consume → publish, and in gRPC metadata."""

from __future__ import annotations

import pytest
from bus_helpers import SUBMITTED, Recorder, consuming, pending, submitted
from opentelemetry import trace

from muster.bus import EVENTS_STREAM, Bus
from muster.bus.tracing import (
    context_from_metadata,
    metadata_from_context,
    setup_tracing,
    tracer,
)
from muster.contracts.v1.events_pb2 import Envelope

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def _tracing() -> None:
    setup_tracing("muster-tests")


def current_trace_id() -> int:
    return trace.get_current_span().get_span_context().trace_id


async def test_trace_context_survives_publish_and_consume(bus: Bus) -> None:
    seen: list[int] = []

    async def note_and_react(env: Envelope) -> None:
        seen.append(current_trace_id())
        await bus.publish(pending(env.workload, "caused", cause=env))

    handler = Recorder(note_and_react)
    with tracer().start_as_current_span("submit") as span:
        submit_trace = span.get_span_context().trace_id
        await bus.publish(submitted("ns/a"))
    assert current_trace_id() == 0  # outside the span: nothing current

    async with consuming(bus, "admission", [SUBMITTED], handler):
        await handler.wait_for_count(1)
    assert seen == [submit_trace]
    caused = await bus.js.get_msg(EVENTS_STREAM, 2)
    assert caused.headers is not None
    assert caused.headers["traceparent"].split("-")[1] == f"{submit_trace:032x}"


def test_new_event_carries_the_cause_trace_when_no_span_is_current() -> None:
    cause = submitted("ns/a")
    cause.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert pending("ns/a", "m", cause=cause).traceparent == cause.traceparent


def test_grpc_metadata_round_trips_the_trace_context() -> None:
    with tracer().start_as_current_span("call") as span:
        metadata = metadata_from_context()
    assert [k for k, _ in metadata] == ["traceparent"]
    ctx = context_from_metadata([("authorization", "Bearer x"), *metadata])
    remote = trace.get_current_span(ctx).get_span_context()
    assert remote.trace_id == span.get_span_context().trace_id
    assert remote.is_remote


def test_metadata_without_trace_context_gives_an_empty_context() -> None:
    ctx = context_from_metadata([("authorization", b"Bearer x")])
    assert not trace.get_current_span(ctx).get_span_context().is_valid
