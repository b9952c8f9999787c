"""Trace context across publish → consume → publish, and in gRPC metadata."""

from __future__ import annotations

import pytest
from bus_helpers import SUBMITTED, Recorder, consuming, pending, submitted
from opentelemetry import trace

from muster.bus import EVENTS_STREAM, Bus, tracing
from muster.bus.envelope import encode
from muster.bus.subjects import subject_of
from muster.bus.tracing import (
    context_from_metadata,
    continue_trace,
    metadata_from_context,
    setup_tracing,
    trace_headers,
    tracer,
)
from muster.contracts.v1.events_pb2 import Envelope

pytestmark = pytest.mark.timeout(30)


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(autouse=True)
def _tracing() -> None:
    setup_tracing("muster-tests", record=True)


@pytest.fixture
def no_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a service with no exporter configured: no tracer provider, so no spans."""
    monkeypatch.setattr(tracing, "recording", lambda: False)


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
    cause.traceparent = TRACEPARENT
    assert pending("ns/a", "m", cause=cause).traceparent == cause.traceparent


@pytest.mark.usefixtures("no_spans")
async def test_without_spans_a_handler_still_passes_the_trace_on(bus: Bus) -> None:
    async def react(env: Envelope) -> None:
        assert not trace.get_current_span().get_span_context().is_valid  # no span made
        await bus.publish(pending(env.workload, "no cause given"))

    handler = Recorder(react)
    event = submitted("ns/a")
    event.traceparent = TRACEPARENT
    await bus.publish(event)
    async with consuming(bus, "admission", [SUBMITTED], handler):
        await handler.wait_for_count(1)
    caused = await bus.js.get_msg(EVENTS_STREAM, 2)
    assert caused.headers is not None
    assert caused.headers["traceparent"] == TRACEPARENT


@pytest.mark.usefixtures("no_spans")
async def test_an_event_with_its_trace_in_headers_only_passes_it_on(bus: Bus) -> None:
    async def react(env: Envelope) -> None:
        await bus.publish(pending(env.workload, "no cause given"))

    handler = Recorder(react)
    event = submitted("ns/a")  # another writer's: no trace context in the envelope
    await bus.js.publish(subject_of(event), encode(event), headers={"traceparent": TRACEPARENT})
    async with consuming(bus, "admission", [SUBMITTED], handler):
        await handler.wait_for_count(1)
    caused = await bus.js.get_msg(EVENTS_STREAM, 2)
    assert caused.headers is not None
    assert caused.headers["traceparent"] == TRACEPARENT


@pytest.mark.usefixtures("no_spans")
def test_without_spans_a_new_trace_is_started_where_asked() -> None:
    with continue_trace({}, "call", kind=trace.SpanKind.SERVER, new_trace=True) as span:
        started = trace_headers()["traceparent"]
    assert span is None
    version, trace_id, parent_id, flags = started.split("-")
    assert (version, len(trace_id), len(parent_id), flags) == ("00", 32, 16, "01")
    assert trace_headers() == {}  # only inside
    with continue_trace({}, "call", kind=trace.SpanKind.SERVER, new_trace=True):
        assert trace_headers()["traceparent"] != started


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
