"""`--metrics-port` (MUSTER_METRICS_PORT) on a real service process: /metrics on the health
host with the bus's series counting what the service did; off by default; a port taken is a
clear failure."""

from __future__ import annotations

import argparse
import asyncio
import socket
from pathlib import Path

import pytest
from admission_world import drained
from budget import seconds_left
from bus_helpers import EventLog, submitted
from scrape_helpers import scrape
from test_bus_service import SERVING, tiny_service

from muster.bus import Bus
from muster.bus.service import add_common_flags, config_from_args

pytestmark = pytest.mark.timeout(60)


async def test_metrics_count_what_the_service_consumed_and_published(
    nats_server: str, tmp_path: Path, bus: Bus, events: EventLog
) -> None:
    async with tiny_service(nats_server, tmp_path, "--metrics-port", "0") as service:
        assert service.proc.stdout is not None
        line = await asyncio.wait_for(service.proc.stdout.readline(), seconds_left())
        assert line.startswith(b"metrics: 127.0.0.1:"), line
        address = line.decode().split(" ", 1)[1].strip()
        await service.wait_for_status(SERVING)
        await bus.publish(submitted("ns/a"))
        await events.wait_for("pending", workload="ns/a")
        # The handler's last publish is seen before its consumer counts it: its ack follows.
        await drained(bus, "tiny")
        samples = await asyncio.to_thread(scrape, address)
    consumed = {
        ("service", "tiny"),
        ("consumer", "tiny"),
        ("type", "workload.submitted"),
        ("outcome", "ack"),
    }
    assert samples[("muster_events_consumed_total", frozenset(consumed))] == 1
    for published in ("workload.running", "workload.pending"):
        labels = frozenset({("service", "tiny"), ("type", published)})
        assert samples[("muster_events_published_total", labels)] == 1
    assert ("process_cpu_seconds_total", frozenset()) in samples


async def test_a_metrics_port_in_use_stops_the_service_with_status_1(
    nats_server: str, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        async with tiny_service(nats_server, tmp_path, "--metrics-port", port) as service:
            assert await service.exit_status(timeout_s=seconds_left()) == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in service.log.read_text()


def config(argv: list[str]) -> int | None:
    parser = argparse.ArgumentParser()
    add_common_flags(parser)
    return config_from_args(parser.parse_args(argv), "tiny").metrics_port


def test_metrics_are_off_unless_a_port_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSTER_METRICS_PORT", raising=False)
    assert config([]) is None
    assert config(["--metrics-port", "9090"]) == 9090
    monkeypatch.setenv("MUSTER_METRICS_PORT", "8080")
    assert config([]) == 8080
    with pytest.raises(ValueError, match=r"metrics port must be in 0\.\.65535, got 70000"):
        config(["--metrics-port", "70000"])
