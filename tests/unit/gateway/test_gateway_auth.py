"""The pure parts of authentication: bearer tokens in metadata, certificate subjects, the
tokens file."""

from __future__ import annotations

import pytest

from muster.gateway.auth import bearer_token
from muster.gateway.auth_certs import split_subject, subject_caller
from muster.gateway.auth_tokens import LegacyToken, parse_tokens, token_hash
from muster.gateway.permissions import Caller, PolicyError
from muster.gateway.reloading import FileError


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param([("authorization", "Bearer s3cret")], "s3cret", id="bearer"),
        pytest.param([("Authorization", b"bearer s3cret")], "s3cret", id="bytes, any case"),
        pytest.param([("x", "y"), ("authorization", "Bearer a b")], "a b", id="among others"),
        pytest.param([("authorization", "Basic s3cret")], None, id="other scheme"),
        pytest.param([("authorization", "Bearer ")], None, id="empty"),
        pytest.param([], None, id="none"),
        pytest.param(None, None, id="no metadata"),
    ],
)
def test_bearer_token_is_read_from_authorization_metadata(
    metadata: list[tuple[str, str | bytes]] | None, expected: str | None
) -> None:
    assert bearer_token(metadata) == expected


@pytest.mark.parametrize(
    ("subject", "pairs"),
    [
        ("CN=alice", [("CN", "alice")]),
        ("O=team-a,O=ml,CN=alice", [("O", "team-a"), ("O", "ml"), ("CN", "alice")]),
        (r"O=ml\, research\+x,CN=a\=b", [("O", "ml, research+x"), ("CN", "a=b")]),
        (r"CN=J\C3\A9r\C3\B4me", [("CN", "Jérôme")]),
        ("CN=a+O=b", [("CN", "a"), ("O", "b")]),  # a multi-valued RDN
    ],
)
def test_rfc2253_subjects_are_split_and_unescaped(
    subject: str, pairs: list[tuple[str, str]]
) -> None:
    assert split_subject(subject) == pairs


@pytest.mark.parametrize("subject", ["CN", r"CN=a\ZZ", "CN=a\\"])
def test_malformed_subjects_are_refused(subject: str) -> None:
    with pytest.raises(ValueError, match="offset"):
        split_subject(subject)


def test_the_client_certificate_names_user_by_cn_and_groups_by_o_in_order() -> None:
    context = {"x509_subject": [rb"O=ml\, research,O=team-a,CN=alice"]}

    assert subject_caller(context) == Caller(
        user="alice", groups=("team-a", "ml, research"), via="certificate"
    )
    assert subject_caller({"x509_subject": [b"O=team-a"]}) is None  # no CN: no user
    assert subject_caller({}) is None


def test_the_tokens_file_maps_token_hashes_to_callers() -> None:
    text = f"tokens:\n- {{sha256: {token_hash('t1')}, user: alice, groups: [a, b]}}\n"

    found = parse_tokens(text.encode())

    assert found == {token_hash("t1"): Caller(user="alice", groups=("a", "b"), via="token")}
    assert parse_tokens(b"") == {}


def test_a_bad_tokens_file_names_each_entry_and_field_but_no_value() -> None:
    text = (
        "tokens:\n"
        "- {sha256: secret-looking-value, user: alice}\n"
        f"- {{sha256: {token_hash('t')}, groups: [1]}}\n"
        "- {sha256: " + token_hash("u") + ", user: x, extra: 1}\n"
    )

    with pytest.raises(PolicyError) as caught:
        parse_tokens(text.encode())

    assert caught.value.problems == (
        "tokens: tokens[0].sha256: must be 64 hex digits (the SHA-256 of the token)",
        "tokens: tokens[1].user: is required",
        "tokens: tokens[1].groups: must be a list of non-empty strings",
        "tokens: tokens[2].extra: unknown field",
    )
    with pytest.raises(FileError, match=r"^tokens: line 3: invalid YAML$"):
        parse_tokens(b"tokens:\n - [secret-token\n")


def test_a_tokens_file_is_read_within_muster_yaml_bounds() -> None:
    # An alias bomb in a mounted Secret must not stall the gateway on every reload.
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
    )

    with pytest.raises(FileError, match=r"^tokens: line 5: invalid YAML$"):
        parse_tokens(bomb.encode())
    with pytest.raises(FileError, match=r"^tokens: \(file\): holds 2 YAML documents"):
        parse_tokens(b"tokens: []\n---\ntokens: []\n")


def test_the_legacy_token_is_an_admin_and_nothing_else_matches() -> None:
    legacy = LegacyToken("s3cret")

    assert legacy.caller("s3cret") == Caller(
        user="muster:legacy-token", groups=("muster:admins",), via="legacy-token"
    )
    assert legacy.caller("s3cre") is None


async def test_local_tokens_answer_at_once_as_the_chain_does_and_a_review_does_not() -> None:
    from muster.gateway.auth import ANONYMOUS, Authentication
    from muster.gateway.auth_config import _Sync

    class Reviewed:  # a TokenReview stands for any authenticator that asks someone
        async def authenticate(self, token: str) -> Caller | None:
            return None

    local = Authentication(tokens=[_Sync(LegacyToken("s3cret"))])
    asked = [(("authorization", f"Bearer {t}"),) for t in ("s3cret", "wrong")] + [()]
    assert local.at_once
    for metadata in asked:
        assert local.caller_at_once(metadata, None) == await local.caller(metadata, None)
    assert [local.caller_at_once(m, None) is None for m in asked] == [False, True, True]
    assert Authentication(anonymous=ANONYMOUS).caller_at_once((), None) == ANONYMOUS
    assert not Authentication(tokens=[_Sync(LegacyToken("s3cret")), Reviewed()]).at_once
