"""No credential in a log line: NATS URLs with a user and password, passwords and tokens given
as flags, bearer tokens, wherever a message or an exception puts them."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from muster.bus.connection import BusConfig
from muster.bus.logfmt import LogfmtFormatter
from muster.bus.redact import redact, redact_url, register

TINY = Path(__file__).with_name("tiny_service.py")
SECRETS = ("url-s3cret-pw", "flag-s3cret-pw", "flag-s3cret-token")

pytestmark = pytest.mark.timeout(60)


def test_a_service_that_cannot_reach_nats_logs_where_but_no_credential() -> None:
    done = subprocess.run(
        [
            sys.executable, str(TINY),
            "--nats", "nats://muster:url-s3cret-pw@127.0.0.1:1,nats://127.0.0.1:2",
            "--nats-password", "flag-s3cret-pw",
            "--nats-token", "flag-s3cret-token",
            "--nats-connect-timeout", "1",
            "--log-level", "DEBUG",
        ],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "cannot connect to NATS" in out
    assert "nats://***@127.0.0.1:1,nats://127.0.0.1:2 not reachable" in out  # where, not who
    assert [s for s in SECRETS if s in out] == []


def test_the_log_formatter_masks_registered_secrets_and_credential_patterns() -> None:
    register("registered-s3cret")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LogfmtFormatter("test"))
    log = logging.getLogger("test.redact")
    log.addHandler(handler)
    try:
        log.warning("got %s", "registered-s3cret")
        log.warning("connect nats://u:p4ss@host:4222 failed", extra={"url": "tls://a:b@c:1"})
        try:
            raise ValueError("Authorization: Bearer abc.def-123 refused")
        except ValueError:
            log.exception("call failed")
        log.warning("config %r", BusConfig(user="u", password="bus-s3cret", token="tok-s3cret"))
    finally:
        log.removeHandler(handler)
    text = stream.getvalue()
    for secret in ("registered-s3cret", "p4ss", "u:p4ss", "a:b@", "abc.def-123", "bus-s3cret"):
        assert secret not in text, text
    assert "tok-s3cret" not in text
    assert "nats://***@host:4222" in text
    assert "user='u'" in text  # who is not a secret


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nats://user:pw@h:4222", "nats://***@h:4222"),
        ("tls://token@h:4222 and nats://h:1", "tls://***@h:4222 and nats://h:1"),
        ("password=hunter22 user=bob", "password=*** user=bob"),
        ('{"token": "abcd1234"}', '{"token": "***"}'),
        ("authorization: Bearer x.y.z", "authorization: ***"),
        ("no credential here: nats://h:4222", "no credential here: nats://h:4222"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_redact_url_keeps_every_server() -> None:
    assert redact_url("nats://a:b@h1:1, nats://h2:2") == "nats://***@h1:1,nats://h2:2"
    assert redact_url("nats://h:4222") == "nats://h:4222"
