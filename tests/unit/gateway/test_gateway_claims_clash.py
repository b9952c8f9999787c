"""Which gateways may run together (gateway/claims.py `clash`): each `--name-claims` mode
beside the next one only; a gateway of before (source "gateway") is `kv`; the watcher's
`submitted` is no gateway's."""

from __future__ import annotations

import pytest

from muster.gateway.claims import NAME_CLAIMS, NameClaims, claims_of_source, claims_source, clash


@pytest.mark.parametrize("mode", NAME_CLAIMS)
def test_each_mode_is_read_back_from_the_source_it_writes(mode: NameClaims) -> None:
    assert claims_of_source(claims_source(mode)) == mode


def test_a_gateway_of_before_is_kv_and_the_watcher_is_no_gateway() -> None:
    assert claims_source("kv") == "gateway"  # what every gateway of before wrote
    assert claims_of_source("gateway") == "kv"
    assert claims_of_source("watcher/local") is None
    assert claims_of_source("gateway/later-mode") is None
    assert clash("submitted", "watcher/local") is None


@pytest.mark.parametrize(
    ("mine", "theirs", "clashes"),
    [
        ("kv", "kv", False),
        ("kv", "both", False),
        ("kv", "submitted", True),
        ("both", "kv", False),
        ("both", "submitted", False),
        ("submitted", "both", False),
        ("submitted", "kv", True),
        ("submitted", "submitted", False),
    ],
)
def test_modes_run_beside_the_next_one_only(
    mine: NameClaims, theirs: NameClaims, clashes: bool
) -> None:
    assert clash(mine, claims_source(theirs)) == (theirs if clashes else None)
