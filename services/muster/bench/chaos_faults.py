"""The faults of `muster bench chaos`: SIGKILL a service and start it again as Kubernetes would,
restart nats-server, and notice a service that exits without being killed.

Kills go round every service of the stack in a shuffled order (so every kind is hit); a killed
service is started again `restart_delay_s` later with the same flags, and the next kill comes
about `every_s` after it serves again. On an idle machine a service is back within a second; on
a loaded one a start takes many times longer, and kills made every `every_s` regardless had most
services down at once: a gateway was killed again before it had answered one Submit, and a run
made no progress for minutes. A service that exits on its own is recorded and started again too.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path

from muster.bus.cancel import finishing
from muster.launcher.nats_server import LaunchError, NatsServer
from muster.launcher.stack import Stack

log = logging.getLogger(__name__)

_EXIT_POLL_S = 0.2
_STARTS = 3  # tries to start a killed service again


class Faults:
    def __init__(
        self, stack: Stack, nats: NatsServer, *, rng: random.Random, log_dir: Path
    ) -> None:
        self.stack = stack
        self.nats = nats
        self.rng = rng
        self.log_dir = log_dir
        self.kills: dict[str, int] = {}
        self.nats_restarts = 0
        self.exits: list[str] = []  # services that exited without being killed, and why
        self._ours: set[str] = set()  # being killed or started again by us
        self._restarts: set[asyncio.Task[None]] = set()
        self.every_kind_killed = asyncio.Event()  # set once each service was killed at least once

    async def run(
        self, *, every_s: float, restart_delay_s: float, nats_at_s: Sequence[float]
    ) -> None:
        """Kill and restart, one service at a time, until cancelled; nats-server restarts
        `nats_at_s` seconds in."""
        start = time.monotonic()
        names = [s.name for s in self.stack.services]
        order: list[str] = []
        nats_due = sorted(nats_at_s)
        while True:
            await asyncio.sleep(every_s * self.rng.uniform(0.5, 1.5))
            if nats_due and time.monotonic() - start >= nats_due[0]:
                nats_due.pop(0)
                await finishing(self._restart_nats())
                continue
            if not order:
                order = self.rng.sample(names, len(names))
            name = order.pop()
            if name in self._ours:
                continue  # not back from its last kill yet
            self._ours.add(name)
            await finishing(self.stack.kill(name))
            self.kills[name] = self.kills.get(name, 0) + 1
            if self.kills.keys() >= set(names):
                self.every_kind_killed.set()
            back = self._bring_back(name, delay_s=restart_delay_s)
            await asyncio.wait([back])  # cancelling `run` leaves the start to `restore`

    async def watch_exits(self) -> None:
        """Record (and start again) every service that exits without being killed."""
        while True:
            await asyncio.sleep(_EXIT_POLL_S)  # polling the processes' exit status
            for svc in self.stack.services:
                proc = svc.process
                if proc is None or proc.returncode is None or svc.name in self._ours:
                    continue
                self.exits.append(
                    f"{svc.name} exited with status {proc.returncode}; see {svc.log_path}"
                )
                log.error("%s exited on its own (status %s)", svc.name, proc.returncode)
                self._ours.add(svc.name)
                self._bring_back(svc.name, delay_s=0.0)

    async def restore(self) -> None:
        """Wait for the restarts in flight; start whatever is still down."""
        await asyncio.gather(*self._restarts, return_exceptions=True)
        for svc in self.stack.services:
            if svc.process is not None and svc.process.returncode is not None:
                self._ours.add(svc.name)
                self._bring_back(svc.name, delay_s=0.0)
        await asyncio.gather(*self._restarts, return_exceptions=True)

    def _bring_back(self, name: str, *, delay_s: float) -> asyncio.Task[None]:
        task = asyncio.create_task(self._start_again(name, delay_s))
        self._restarts.add(task)
        task.add_done_callback(self._restarts.discard)
        return task

    async def _start_again(self, name: str, delay_s: float) -> None:
        try:
            await asyncio.sleep(delay_s)
            for _ in range(_STARTS):
                try:
                    await self.stack.restart(name)
                    return
                except LaunchError as err:  # an exit nobody asked for: recorded, tried again
                    self.exits.append(f"{name} did not start again: {err}")
        finally:
            self._ours.discard(name)

    async def _restart_nats(self) -> None:
        await self.nats.stop()
        await self.nats.start(log_path=self.log_dir / "nats-server.log")
        self.nats_restarts += 1
