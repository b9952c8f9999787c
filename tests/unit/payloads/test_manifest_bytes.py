"""A manifest's bytes are fixed forever: a Submit's event ids hash them (gateway/submit.py), so a
retried Submit must hash the same bytes on any gateway version, whatever encodes them."""

from __future__ import annotations

import datetime
import json
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.payloads import manifest_json

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.dates()
    | st.datetimes(timezones=st.just(datetime.UTC))
)
DOCUMENTS = st.dictionaries(
    st.text(),
    st.recursive(
        _SCALARS,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    ),
    max_size=6,
)


def _date(value: object) -> str:
    assert isinstance(value, datetime.date)
    return value.isoformat().replace("+00:00", "Z")


@settings(max_examples=300)
@given(DOCUMENTS)
def test_the_bytes_are_json_with_sorted_keys_no_spaces_and_dates_as_rfc3339(
    doc: dict[str, Any],
) -> None:
    expected = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=_date)
    assert manifest_json(doc) == expected


def test_what_is_not_json_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="set is not JSON"):
        manifest_json({"a": {1, 2}})


def test_threads_encoding_at_once_get_each_its_own_bytes() -> None:
    # The encoder is shared: one call's document never leaks into another's bytes.
    found: dict[int, set[str]] = {}

    def encode(n: int) -> None:
        found[n] = {manifest_json({"n": n, "items": list(range(n))}) for _ in range(300)}

    threads = [threading.Thread(target=encode, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found == {n: {json.dumps({"items": list(range(n)), "n": n}, separators=(",", ":"))}
                     for n in range(8)}  # fmt: skip
