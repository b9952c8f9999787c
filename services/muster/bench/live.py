"""A live stack for the benchmarks that run workloads through every service process."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from muster.cluster.sim.backend import SimBackend
from muster.launcher.nats_server import NatsServer
from muster.launcher.stack import SOLE_BINDERS_BOUND_EVENTS, SOLE_GATEWAYS_CLAIMS, Stack


@dataclass(frozen=True, slots=True)
class Live:
    url: str
    nats: NatsServer
    stack: Stack
    js: JetStreamContext  # the bench's own connection's


@contextlib.asynccontextmanager
async def live_stack(
    *,
    prefix: str,
    nodes: Sequence[Mapping[str, object]],
    environment: Mapping[str, str] | None = None,
) -> AsyncIterator[Live]:
    """A fresh loopback nats-server and the processes `muster run` starts (one admission
    shard, the simulated cluster `local` with `nodes`), each with `environment` added; all
    stopped after. Their logs, in a temporary directory named `prefix...`, stay when the body
    failed."""
    log_dir = Path(tempfile.mkdtemp(prefix=prefix))
    nats = NatsServer(log_dir / "jetstream")
    url = await nats.start(log_path=log_dir / "nats-server.log")
    stack = Stack(
        nats_url=url, cluster="local", shards=1, speed=1.0, log_dir=log_dir,
        name_claims=SOLE_GATEWAYS_CLAIMS, bound_events=SOLE_BINDERS_BOUND_EVENTS,
        environment=environment,
    )  # fmt: skip
    try:
        await stack.start()
        backend = await SimBackend.connect(url, cluster="local")
        for node in nodes:
            await backend.apply(node)
        await backend.close()
        nc = NatsClient()
        await nc.connect(url, name="muster-bench")
        try:
            yield Live(url=url, nats=nats, stack=stack, js=nc.jetstream())
        finally:
            await nc.close()
    finally:
        await stack.stop()
        await nats.stop()
    shutil.rmtree(log_dir, ignore_errors=True)
