"""The chaos bench's faults: one service down at a time, however long a start takes."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from muster.bench.chaos_faults import Faults

NAMES = ("gateway", "admission-0", "binder")


class SlowStack:
    """A stack whose restarts serve only when the test says so."""

    def __init__(self) -> None:
        self.services = [SimpleNamespace(name=name, process=None) for name in NAMES]
        self.killed: list[str] = []
        self.down: set[str] = set()
        self.most_down = 0
        self.serve = {name: asyncio.Event() for name in NAMES}

    async def kill(self, name: str) -> None:
        self.killed.append(name)
        self.down.add(name)
        self.most_down = max(self.most_down, len(self.down))

    async def restart(self, name: str) -> None:
        await self.serve[name].wait()
        self.serve[name].clear()
        self.down.discard(name)


async def test_the_next_kill_waits_until_the_last_killed_service_serves_again(
    tmp_path: Path,
) -> None:
    stack = SlowStack()
    faults = Faults(cast(Any, stack), cast(Any, None), rng=random.Random(7), log_dir=tmp_path)
    run = asyncio.create_task(faults.run(every_s=0.0, restart_delay_s=0.0, nats_at_s=[]))
    try:
        for count in range(1, len(NAMES) + 1):
            while len(stack.killed) < count:  # noqa: ASYNC110 (the fake stack, stepped)
                await asyncio.sleep(0)
            for _ in range(50):  # the loop runs on: a start that takes long delays the next kill
                await asyncio.sleep(0)
            assert len(stack.killed) == count
            assert not faults.every_kind_killed.is_set() or count == len(NAMES)
            stack.serve[stack.killed[-1]].set()
        assert sorted(stack.killed) == sorted(NAMES)  # one round: every kind
        assert faults.every_kind_killed.is_set()
        assert stack.most_down == 1
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        for event in stack.serve.values():
            event.set()
        await faults.restore()
