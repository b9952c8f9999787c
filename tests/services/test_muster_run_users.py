"""`muster run`'s NATS: one user per service with a password made for this run, told to each
service in its environment only; the server refuses anyone else and has no monitoring port."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import nats
import nats.errors
import pytest

from muster.bus.permissions import ADMIN, Deployment, users
from muster.launcher.nats_server import NatsServer
from muster.launcher.stack import Stack

DEPLOYMENT = Deployment(clusters=("local", "east"), simulated=("local", "east"))

pytestmark = pytest.mark.timeout(60)


def test_each_service_process_gets_its_own_user_in_its_environment(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "js", deployment=DEPLOYMENT)
    stack = Stack(
        nats_url=server.url,
        cluster="local",
        shards=1,
        speed=10,
        log_dir=tmp_path,
        workers=["east"],
        passwords=server.passwords,
    )
    seen = {}
    for svc in stack.services:
        assert svc.env is not None, svc.name
        user, password = svc.env["MUSTER_NATS_USER"], svc.env["MUSTER_NATS_PASSWORD"]
        assert password == server.passwords[user]
        assert password not in " ".join(svc.argv)  # `ps` shows argv to everyone
        seen[svc.name] = user
    assert seen["binder-east"] == "binder-east"
    assert seen["watcher"] == "watcher-local"
    assert seen["admission-0"] == "admission"
    assert len(set(seen.values())) == len(seen)  # no two processes share a user
    assert ADMIN not in seen.values()  # the admin is the launcher's own
    assert {u.name for u in users(DEPLOYMENT)} == set(server.passwords)
    assert len(set(server.passwords.values())) == len(server.passwords)


def test_passwords_are_new_for_every_run(tmp_path: Path) -> None:
    first = NatsServer(tmp_path / "a", deployment=DEPLOYMENT).passwords
    second = NatsServer(tmp_path / "b", deployment=DEPLOYMENT).passwords
    assert first.keys() == second.keys()
    assert not set(first.values()) & set(second.values())


async def test_the_server_refuses_strangers_and_keeps_its_config_private(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "js", deployment=DEPLOYMENT)
    await server.start(log_path=tmp_path / "nats-server.log")
    try:
        config = tmp_path / "js" / "nats.conf"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        assert "http" not in config.read_text().replace("# no `http`", "")  # no monitoring
        with pytest.raises((nats.errors.Error, OSError)):
            await nats.connect(server.url, allow_reconnect=False, connect_timeout=2)
        with pytest.raises((nats.errors.Error, OSError)):
            await nats.connect(
                server.url,
                user="binder-local",
                password="guessed",
                allow_reconnect=False,
                connect_timeout=2,
            )
        nc = await nats.connect(
            server.url, user="binder-local", password=server.passwords["binder-local"]
        )
        await asyncio.wait_for(nc.flush(), 5)
        await nc.close()
    finally:
        await server.stop()
