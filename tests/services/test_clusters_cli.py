"""`muster clusters` against a running gateway: the clusters with their totals, a cluster's
nodes page by page (`--nodes --limit`, then `--continue`), `-o json|yaml`, and the gateway's
refusals (PERMISSION_DENIED naming the permission, NOT_FOUND, flags that go together).

The command is a synchronous gRPC client, so it runs in a thread while the gateway serves on
the test's event loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from cluster_rooms import report, room
from gateway_helpers import RunningGateway
from security_helpers import secured_gateway, token_of

from muster.bus import Bus
from muster.cli.main import main

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def gw(bus: Bus, tmp_path: Path) -> AsyncIterator[RunningGateway]:
    await report(bus, "east", [room(i, prefix="east") for i in range(5)])
    await report(bus, "gone", [], unreachable="dial tcp: connection refused")
    async with secured_gateway(bus, tmp_path) as running:
        yield running


async def muster(gw: RunningGateway, *argv: str, user: str = "viewer") -> int:
    """Run `muster clusters ARGV` as `user` in a thread; its exit status."""
    flags = ["--gateway", gw.address, "--token", token_of(user)]
    return await asyncio.to_thread(main, ["clusters", *argv, *flags])


async def test_lists_each_cluster_with_its_state_nodes_and_room(
    gw: RunningGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await muster(gw) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "CLUSTER", "STATE", "NODES", "FREE/ALLOCATABLE", "HEARTBEAT-AGE", "MESSAGE"
    ]  # fmt: skip
    east = lines[1].split()
    assert east[:3] == ["east", "Ready", "5"]
    assert east[3].startswith("cpu=30/40,memory=160Gi/160Gi,")  # free 8+7+6+5+4 of 5 x 8
    assert east[4].endswith("s")
    assert lines[2].split()[:3] == ["gone", "Unavailable", "(ClientConnectionFailed)"]
    assert lines[2].endswith("dial tcp: connection refused")


async def test_pages_through_a_clusters_nodes_with_the_token_it_prints(
    gw: RunningGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await muster(gw, "east", "--nodes", "--limit", "2") == 0
    first = capsys.readouterr()
    hint = first.err.strip()
    assert hint.startswith("3 more nodes: muster clusters east --nodes --continue ")

    token = hint.rsplit(" ", 1)[1]
    assert await muster(gw, "east", "--nodes", "--limit", "2", "--continue", token) == 0
    second = capsys.readouterr()

    names = [line.split()[1] for out in (first.out, second.out) for line in out.splitlines()[1:]]
    assert names == ["east-00000", "east-00001", "east-00002", "east-00003"]
    assert second.err.startswith("1 more nodes:")
    assert first.out.splitlines()[1].split()[2:] == [
        "cpu=8/8,memory=32Gi/32Gi,pods=110/110",
        "0",
        "-",
    ]


async def test_json_and_yaml_are_the_whole_answer(
    gw: RunningGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await muster(gw, "east", "--nodes", "-o", "json") == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["clusters"][0]["nodeCount"] == 5
    assert [n["name"] for n in answer["clusters"][0]["nodes"]][-1] == "east-00004"

    assert await muster(gw, "-o", "yaml") == 0
    listed = yaml.safe_load(capsys.readouterr().out)
    assert [c["name"] for c in listed["clusters"]] == ["east", "gone"]
    assert listed["clusters"][0]["nodes"] == []


async def test_refusals_name_the_permission_the_cluster_or_the_flag(
    gw: RunningGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await muster(gw, user="alice") == 1  # watch in team-a only
    denied = capsys.readouterr().err
    assert denied.startswith("muster: PERMISSION_DENIED: ")
    assert "watch" in denied

    assert await muster(gw, "north") == 2
    assert capsys.readouterr().err.startswith("muster: NOT_FOUND: cluster: 'north'")

    assert await muster(gw, "--limit", "5") == 2
    assert capsys.readouterr().err == "muster: --limit: pages nodes; add --nodes\n"

    assert await muster(gw, "east", "--nodes", "--limit", "0") == 2
    assert capsys.readouterr().err == "muster: --limit: must be from 1 to 10000, got 0\n"
