"""`muster.api.ids`: the cheap UUID strings are the standard library's, bit for bit.

Event ids and derived uids must never change across an upgrade (JetStream dedupes on them), so
the cheap spelling is checked against `uuid` itself over arbitrary names.
"""

from __future__ import annotations

import uuid
from typing import Literal

from hypothesis import given
from hypothesis import strategies as st

from muster.api.ids import uuid4_text, uuid5_text
from muster.bus.envelope import EVENT_ID_NAMESPACE
from muster.gateway.submit import SUBMIT_ID_NAMESPACE

NAMESPACES = [uuid.NAMESPACE_URL, uuid.NAMESPACE_DNS, EVENT_ID_NAMESPACE, SUBMIT_ID_NAMESPACE]


SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # not encodable as UTF-8


@given(
    name=st.text(st.characters(exclude_categories=SURROGATES)), which=st.sampled_from(NAMESPACES)
)
def test_uuid5_text_is_the_standard_librarys(name: str, which: uuid.UUID) -> None:
    assert uuid5_text(which, name) == str(uuid.uuid5(which, name))


def test_uuid4_text_is_a_random_version_4_uuid() -> None:
    drawn = {uuid4_text() for _ in range(1000)}
    assert len(drawn) == 1000
    for text in drawn:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
