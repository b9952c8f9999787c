"""The flags every service shares: each flag and its environment variable reach ServiceConfig,
and `--stream-replicas` reaches the streams and buckets muster creates."""

from __future__ import annotations

import argparse

import msgspec
import pytest

from muster.bus import BusConfig, connect
from muster.bus.errors import Unavailable
from muster.bus.service import ServiceConfig, add_common_flags, config_from_args
from muster.bus.subjects import stream_configs

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
    assert config.bus.stream_replicas == 1
    assert config.stall_s == 60


def test_flags_reach_the_config() -> None:
    config = parse(
        [
            "--nats", "nats://n1:4222,nats://n2:4222", "--nats-creds", "/c.creds",
            "--nats-user", "u", "--nats-password", "p", "--nats-token", "t",
            "--nats-tls-ca", "/ca.pem", "--nats-connect-timeout", "3", "--cluster", "east-1",
            "--health-port", "8081", "--grace-seconds", "2.5", "--max-event-bytes", "4096",
            "--log-level", "debug", "--stream-replicas", "3", "--stall-seconds", "0",
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
    assert bus.stream_replicas == 3
    assert config.stall_s == 0  # off


def test_environment_sets_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_NATS_URL", "nats://env:4222")
    monkeypatch.setenv("MUSTER_CLUSTER", "west")
    monkeypatch.setenv("MUSTER_HEALTH_PORT", "9000")
    monkeypatch.setenv("MUSTER_GRACE_SECONDS", "1")
    monkeypatch.setenv("MUSTER_NATS_TOKEN", "tok")
    monkeypatch.setenv("MUSTER_STREAM_REPLICAS", "3")
    monkeypatch.setenv("MUSTER_STALL_SECONDS", "120")
    config = parse([])
    assert config.stall_s == 120
    assert (config.bus.url, config.cluster, config.health_port) == ("nats://env:4222", "west", 9000)
    assert config.bus.stream_replicas == 3
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
        (["--stall-seconds", "-1"], "stall seconds must be >= 0"),
        (["--stall-seconds", "nan"], "stall seconds must be >= 0"),
        (["--log-level", "loud"], "log level"),
        (["--max-event-bytes", "0"], "max_event_bytes"),
        (["--stream-replicas", "0"], "stream replicas"),
        (["--stream-replicas", "6"], "stream replicas"),
    ],
)
def test_invalid_values_are_refused_with_a_message(argv: list[str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse(argv)


@pytest.mark.parametrize("replicas", [0, 6])
def test_stream_replicas_outside_jetstreams_limit_are_refused(replicas: int) -> None:
    with pytest.raises(ValueError, match=f"stream replicas must be in 1..5, got {replicas}"):
        BusConfig(stream_replicas=replicas)


def test_every_stream_is_created_on_as_many_servers_as_asked() -> None:
    assert {c.name: c.num_replicas for c in stream_configs(replicas=3)} == {
        "MUSTER_EVENTS": 3,
        "MUSTER_COMMANDS": 3,
        "MUSTER_DLQ": 3,
    }


async def test_buckets_are_created_on_as_many_servers_as_asked(bus_config: BusConfig) -> None:
    one = await connect(bus_config)
    try:
        await one.kv("MUSTER_TEST_ONE")
        assert (await one.js.stream_info("KV_MUSTER_TEST_ONE")).config.num_replicas == 1
    finally:
        await one.close()
    three = await connect(msgspec.structs.replace(bus_config, stream_replicas=3))
    try:
        # The test's server is a single one: asked for 3 replicas, it refuses the bucket.
        with pytest.raises(Unavailable, match="replicas > 1 not supported"):
            await three.kv("MUSTER_TEST_THREE")
    finally:
        await three.close()
