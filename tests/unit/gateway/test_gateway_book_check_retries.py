"""`muster describe` shows an admission check as Kueue's status.admissionChecks has it: reset
to Pending at each eviction ("Reset to Pending after eviction. Previously: Retry"), with its
retryCount, one more for each eviction that found it in Retry, started over by one that found
it Ready or Rejected (task checks3)."""

from __future__ import annotations

from test_gateway_book import admission, book_of, env, submitted

from muster.cli.describe import render_description
from muster.contracts.v1 import events_pb2 as pb
from muster.gateway.book import WorkloadBook


def told(state: str) -> pb.Envelope:
    return env("admission_check", pb.AdmissionCheckUpdated(check="prov", state=state))


def reserved() -> pb.Envelope:
    return env("quota_reserved", pb.QuotaReserved(admission=admission(), admission_checks=["prov"]))


def evicted() -> pb.Envelope:
    return env("evicted", pb.WorkloadEvicted(reason="AdmissionCheck", message="Evicted due to"))


def prov(book: WorkloadBook) -> tuple[str, str, int]:
    (entry,) = book
    (c,) = [c for c in entry.describe().conditions if c.type == "AdmissionCheck/prov"]
    return c.reason, c.message, c.retry_count


def test_each_eviction_that_finds_a_retry_counts_it_and_resets_the_check() -> None:
    life = [submitted(), reserved(), told("Retry"), evicted()]
    book = book_of(*life)
    assert prov(book) == ("Pending", "Reset to Pending after eviction. Previously: Retry", 1)

    book = book_of(*life, reserved(), told("Retry"), evicted())
    assert prov(book)[2] == 2

    book = book_of(*life, reserved(), told("Pending"), evicted())  # still Pending: kept
    assert prov(book)[2] == 1


def test_an_answer_keeps_the_count_and_an_eviction_finding_it_ready_starts_over() -> None:
    life = [submitted(), reserved(), told("Retry"), evicted(), reserved(), told("Ready")]
    assert prov(book_of(*life)) == ("Ready", "", 1)
    assert prov(book_of(*life, evicted())) == (
        "Pending", "Reset to Pending after eviction. Previously: Ready", 0)  # fmt: skip


def test_muster_describe_prints_the_count_after_the_check_s_message() -> None:
    life = [submitted(), reserved(), told("Retry"), evicted()]
    (entry,) = book_of(*life)
    text = render_description(entry.describe())
    assert "Reset to Pending after eviction. Previously: Retry (retryCount 1)" in text
