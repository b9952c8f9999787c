"""A muster service run as a process under a NATS user, for tests of how it exits."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path


async def exit_status(
    service: str, *, nats_url: str, user: str, password: str, log: Path, within_s: float
) -> int | None:
    """Run `muster service <service>` on `nats_url` as `user`, its output in `log`; its exit
    status, or None when it was still running after `within_s` (it is killed then)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_NATS_")}
    env |= {"MUSTER_NATS_USER": user, "MUSTER_NATS_PASSWORD": password}
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "muster.cli.main", "service", service,
            "--nats", nats_url, "--health-port", "0",
            stdout=out, stderr=out, env=env,
        )  # fmt: skip
    try:
        return await asyncio.wait_for(proc.wait(), within_s)
    except TimeoutError:
        return None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
