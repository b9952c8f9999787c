"""`format_time` keeps each whole second's text: the value is still the one `datetime` writes
(RFC 3339, UTC, microseconds), whatever the fraction rounds to."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from muster.api.times import format_time, parse_time


def as_datetime_writes(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@given(st.floats(min_value=-2e9, max_value=8e9, allow_nan=False))
def test_any_time_is_written_as_datetime_writes_it(seconds: float) -> None:
    assert format_time(seconds) == as_datetime_writes(seconds)


@pytest.mark.parametrize(
    "seconds",
    [
        1_700_000_000.0,
        1_700_000_000.9999996,  # rounds up into the next second
        1_700_000_000.9999994,
        1_700_000_000.0000005,  # a half: rounded to even
        1_700_000_000.0000015,
        -0.5,
        -1e-7,  # before the epoch, rounds to it
        0.0,
    ],
)
def test_fractions_at_the_edges_of_a_second(seconds: float) -> None:
    assert format_time(seconds) == as_datetime_writes(seconds)


def test_pods_of_one_second_differ_by_their_fraction_only() -> None:
    first, second = format_time(1_700_000_000.25), format_time(1_700_000_000.75)
    assert (first, second) == ("2023-11-14T22:13:20.250000Z", "2023-11-14T22:13:20.750000Z")
    assert parse_time(second) - parse_time(first) == 0.5
