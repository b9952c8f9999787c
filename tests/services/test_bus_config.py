"""The flags every service shares: each flag and its environment variable reach ServiceConfig."""

from __future__ import annotations

import argparse

import pytest

from muster.bus.service import ServiceConfig, add_common_flags, config_from_args

pytestmark = pytest.mark.timeout(10)


def parse(argv: list[str]) -> ServiceConfig:
    parser = argparse.ArgumentParser(prog="svc", exit_on_error=False)
    add_common_flags(parser)
    return config_from_args(parser.parse_args(argv), "binder")


def test_defaults() -> None:
    config = parse([])
    assert config.bus.url == "nats://127.0.0.1:4222"
    assert config.cluster == "local"
    assert config.health_port == 0
    assert config.grace_s == 10
    assert config.bus.max_event_bytes == 1024 * 1024
    assert config.bus.name == "muster-binder"


def test_flags_reach_the_config() -> None:
    config = parse(
        [
            "--nats", "nats://n1:4222,nats://n2:4222", "--nats-creds", "/c.creds",
            "--nats-user", "u", "--nats-password", "p", "--nats-token", "t",
            "--nats-tls-ca", "/ca.pem", "--nats-connect-timeout", "3", "--cluster", "east-1",
            "--health-port", "8081", "--grace-seconds", "2.5", "--max-event-bytes", "4096",
            "--log-level", "debug",
        ]
    )  # fmt: skip
    bus = config.bus
    assert (bus.url, bus.creds_file, bus.user, bus.password, bus.token, bus.tls_ca_file) == (
        "nats://n1:4222,nats://n2:4222", "/c.creds", "u", "p", "t", "/ca.pem",
    )  # fmt: skip
    assert bus.connect_timeout_s == 3
    assert bus.max_event_bytes == 4096
    assert (config.cluster, config.health_port, config.grace_s) == ("east-1", 8081, 2.5)
    assert config.log_level == "DEBUG"


def test_environment_sets_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_NATS_URL", "nats://env:4222")
    monkeypatch.setenv("MUSTER_CLUSTER", "west")
    monkeypatch.setenv("MUSTER_HEALTH_PORT", "9000")
    monkeypatch.setenv("MUSTER_GRACE_SECONDS", "1")
    monkeypatch.setenv("MUSTER_NATS_TOKEN", "tok")
    config = parse([])
    assert (config.bus.url, config.cluster, config.health_port) == ("nats://env:4222", "west", 9000)
    assert (config.grace_s, config.bus.token) == (1, "tok")
    assert parse(["--cluster", "flag-wins"]).cluster == "flag-wins"


def test_a_bad_environment_value_is_reported_like_a_bad_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MUSTER_HEALTH_PORT", "eighty")
    with pytest.raises(argparse.ArgumentError, match="invalid int value: 'eighty'"):
        parse([])


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--cluster", "a.b"], "cluster id"),
        (["--health-port", "70000"], "health port"),
        (["--grace-seconds", "-1"], "grace seconds"),
        (["--log-level", "loud"], "log level"),
        (["--max-event-bytes", "0"], "max_event_bytes"),
    ],
)
def test_invalid_values_are_refused_with_a_message(argv: list[str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse(argv)
