"""A service started by muster's launcher stops once the launcher is gone: a SIGKILLed
`muster run` or bench cannot stop its children, which otherwise ran on for ever."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from budget import wait_s

from muster.bus import Bus

pytestmark = pytest.mark.timeout(60)

LAUNCHER = """
import asyncio, sys
from pathlib import Path
from muster.launcher.stack import Stack

async def main():
    stack = Stack(nats_url=sys.argv[1], cluster="local", shards=1, speed=1,
                  log_dir=Path(sys.argv[2]), only={"preemption"})
    await stack.start()
    print(stack.services[0].process.pid, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def running(pid: int) -> bool:
    """Whether `pid` is a live process (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def test_a_service_stops_once_the_launcher_that_started_it_is_killed(
    nats_server: str, bus: Bus, tmp_path: Path
) -> None:
    launcher = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LAUNCHER, nats_server, str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert launcher.stdout is not None
    try:
        child = int(await asyncio.wait_for(launcher.stdout.readline(), wait_s(None)))
        assert running(child)
    finally:
        launcher.kill()
        await launcher.wait()

    async with asyncio.timeout(wait_s(None)):
        while running(child):  # noqa: ASYNC110  # another process's exit: nothing to await
            await asyncio.sleep(0.1)
