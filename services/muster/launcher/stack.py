"""Every muster service as its own process, started, health-checked and stopped together.

Per cluster (the local one, and each MultiKueue worker): the simulated cluster, watcher, binder
and gang-permit, each with `--cluster <id>`; once: admission shards, preemption, the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from muster.bus.permissions import identity
from muster.gateway.claims import NameClaims
from muster.launcher.cpu_time import cpu_s
from muster.launcher.lifeline import tied_to_launcher
from muster.launcher.nats_server import LaunchError
from muster.launcher.progress import STALL_S, Progress

PER_CLUSTER = ("sim-cluster", "watcher", "binder", "gangpermit")  # in start order
# How the gateway claims names where this launcher starts every gateway its NATS server will
# ever see, all of this version (`muster up`, `muster run` on its own server, the benches): no
# gateway of before runs beside it, so the one-write claim is safe (docs/events.md, "One-write
# claims"). A store left by an older muster is safe too: the gateway claims as `both` until its
# index has read that store's `submitted` to the end.
SOLE_GATEWAYS_CLAIMS: Final[NameClaims] = "submitted"
# The gateway's own variable for `--name-claims`: set in the launcher's environment, it wins.
NAME_CLAIMS_VARIABLE: Final = "MUSTER_GATEWAY_NAME_CLAIMS"
BoundEvents = Literal["all", "binds"]  # the binder's `--bound-events`
# When the binder stores `bound`, where this launcher starts every binder, gang-permit and
# gateway its NATS server will see, all of this version (the same launchers as above): only for
# binds. The pods it makes on their nodes answer a whole permit; gang-permit and the gateway's
# book read them (docs/events.md, "`bound` only for binds").
SOLE_BINDERS_BOUND_EVENTS: Final[BoundEvents] = "binds"
# The binder's own variable for `--bound-events`: set in the launcher's environment, it wins.
BOUND_EVENTS_VARIABLE: Final = "MUSTER_BINDER_BOUND_EVENTS"
_ANNOUNCE = re.compile(rb"^(health|gateway|metrics): (\S+)")


_LOG_TAIL_LINES = 20  # of a service's log, in the error when it exits at start
_REAP_S = 5.0  # for a process that closed its output to be gone
_LOOK_S = 1.0  # between looks at a start's progress


def start_log(log_dir: Path, name: str, starts: int) -> Path:
    """The log of start number `starts` of `name`: `<name>.log`, then `<name>.1.log`, ..."""
    return log_dir / (f"{name}.{starts - 1}.log" if starts > 1 else f"{name}.log")


@dataclass
class ServiceProcess:
    name: str
    argv: list[str]
    log_dir: Path
    kind: str = ""  # the service it runs ("gangpermit", "admission", ...); `name` is per start
    process: asyncio.subprocess.Process | None = None
    starts: int = 0  # how many times it was started
    reader: asyncio.Task[None] | None = None  # copying this start's output to its log
    # "health" / "gateway" / "metrics" (with --metrics-port) -> host:port
    addresses: dict[str, str] = field(default_factory=dict)
    cluster: str = ""  # the cluster of a per-cluster service ("" for admission, ...)
    announced: asyncio.Event = field(default_factory=asyncio.Event)
    env: dict[str, str] | None = None  # its environment (its NATS credentials), else ours

    @property
    def log_path(self) -> Path:
        """This start's log: `<name>.log`, then `<name>.1.log`, ... for each restart (a restart
        that fails leaves the log of the run before it as it was)."""
        return start_log(self.log_dir, self.name, self.starts)

    async def exit_error(self) -> LaunchError:
        """Why it is gone, once its output is copied: its exit status and the end of its log
        (waited for a moment at most: it closed its output, so it is ending)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_REAP_S):
                if self.process is not None:
                    await self.process.wait()
                if self.reader is not None:
                    await asyncio.shield(self.reader)
        status = self.process.returncode if self.process is not None else None
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
        except OSError as err:
            lines = [f"(its log cannot be read: {err})"]
        tail = "".join(f"\n  | {line}" for line in lines)
        return LaunchError(
            f"{self.name} exited at start (status {status}); see {self.log_path}{tail}"
        )


def _cpu_s_of(svc: ServiceProcess) -> float:
    """CPU seconds its process used so far; 0 when unknown (not started, gone, no /proc)."""
    if svc.process is None:
        return 0.0
    try:
        return cpu_s(svc.process.pid)
    except (OSError, IndexError, ValueError):
        return 0.0


def service_argv(name: str, *, nats_url: str, cluster: str, extra: Sequence[str] = ()) -> list[str]:
    return [
        sys.executable,
        *("-m", "muster.cli.main", "service", name),
        *("--nats", nats_url, "--cluster", cluster, "--health-port", "0"),
        *extra,
    ]


def _credentials(user: str, passwords: Mapping[str, str]) -> dict[str, str]:
    """Our environment, with `user`'s NATS credentials instead of any we were given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_NATS_")}
    return {**env, "MUSTER_NATS_USER": user, "MUSTER_NATS_PASSWORD": passwords[user]}


def mode_args(
    flag: str, mode: str | None, variable: str, environment: Mapping[str, str] | None
) -> list[str]:
    """`[flag, mode]` for a service; none when `mode` is None (the service's default) or when
    the service's environment sets the flag's own `variable` (an operator's choice, e.g. to
    compare with the mode of before: the service reads it itself)."""
    if mode is None or variable in {**os.environ, **(environment or {})}:
        return []
    return [flag, mode]


def claims_args(name_claims: NameClaims | None, environment: Mapping[str, str] | None) -> list[str]:
    """The gateway's `--name-claims` flag for `name_claims` (None: its default, `kv`), unless
    MUSTER_GATEWAY_NAME_CLAIMS is set (`mode_args`)."""
    return mode_args("--name-claims", name_claims, NAME_CLAIMS_VARIABLE, environment)


def bound_events_args(
    bound_events: BoundEvents | None, environment: Mapping[str, str] | None
) -> list[str]:
    """The binder's `--bound-events` flag for `bound_events` (None: its default, `all`),
    unless MUSTER_BINDER_BOUND_EVENTS is set (`mode_args`)."""
    return mode_args("--bound-events", bound_events, BOUND_EVENTS_VARIABLE, environment)


def _environment(
    env: dict[str, str] | None, extra: Mapping[str, str] | None
) -> dict[str, str] | None:
    """`env` (None: ours) with `extra` added; None when both are None (the child inherits)."""
    if extra is None:
        return env
    return {**(os.environ if env is None else env), **extra}


class Stack:
    """Start order: the simulated cluster, then the per-cluster services, admission shards,
    preemption and, last, the gateway. Stop order is the reverse."""

    def __init__(
        self,
        *,
        nats_url: str,
        cluster: str,
        shards: int,
        speed: float,
        log_dir: Path,
        admission_args: Sequence[str] = (),
        only: Collection[str] | None = None,
        workers: Sequence[str] = (),
        passwords: Mapping[str, str] | None = None,
        service_args: Mapping[str, Sequence[str]] | None = None,
        gateway_listen: str = "127.0.0.1:0",
        name_claims: NameClaims | None = None,
        bound_events: BoundEvents | None = None,
        environment: Mapping[str, str] | None = None,
        metrics_ports: int | None = None,
        outlive_launcher: bool = False,
        spawned: Callable[[ServiceProcess], None] | None = None,
    ):
        """`only`: start just these services (by name: "binder", "gangpermit", ...).
        `workers`: MultiKueue worker clusters, each with its own per-cluster services (labelled
        `<service>-<cluster>`). `passwords`: NATS user → password; each service then connects
        as its own user (muster.bus.permissions), told in its environment, not its argv.
        `service_args`: more flags per service name. `gateway_listen`: a fixed port keeps the
        gateway's address across its restarts. `name_claims`: the gateway's `--name-claims`
        (`claims_args`; SOLE_GATEWAYS_CLAIMS where no other gateway shares the NATS server; None:
        the gateway's default). `bound_events`: each binder's `--bound-events`
        (`bound_events_args`; SOLE_BINDERS_BOUND_EVENTS where every binder, gang-permit and
        gateway of the NATS server is this launcher's; None: the binder's default).
        `environment`: variables added to every service's (MUSTER_METRICS_PORT, OTEL_*).
        `metrics_ports`: each service serves metrics on this port plus its place in the start
        order (0: each a free one).
        `outlive_launcher`: the services run on if this process is killed (`muster up`: for
        `muster down` to stop); otherwise they stop with it (`muster.launcher.lifeline`).
        `spawned`: told of each start at once (`muster up` records it)."""
        self.log_dir = log_dir
        self._outlive = outlive_launcher
        self._spawned = spawned
        more = service_args or {}
        per_cluster = [
            (
                name,
                [
                    *(["--speed", f"{speed:g}"] if name == "sim-cluster" else []),
                    *(bound_events_args(bound_events, environment) if name == "binder" else []),
                    *more.get(name, ()),
                ],
            )
            for name in PER_CLUSTER
        ]
        specs: list[tuple[str, str, list[str], str]] = [
            (label if c == cluster else f"{label}-{c}", label, extra, c)
            for c in (cluster, *(w for w in workers if w != cluster))
            for label, extra in per_cluster
        ]
        specs += [
            *(
                (
                    f"admission-{i}",
                    "admission",
                    ["--shard", str(i), "--shards", str(shards), *admission_args,
                     *more.get("admission", ())],
                    cluster,
                )
                for i in range(shards)
            ),
            ("preemption", "preemption", [*more.get("preemption", ())], cluster),
            ("gateway", "gateway",
             ["--listen", gateway_listen, *claims_args(name_claims, environment),
              *more.get("gateway", ())],
             cluster),
        ]  # fmt: skip
        if metrics_ports is not None:
            specs = [
                (
                    label,
                    name,
                    [*extra, "--metrics-port", str(metrics_ports and metrics_ports + i)],
                    c,
                )
                for i, (label, name, extra, c) in enumerate(specs)
            ]
        self.services = [
            ServiceProcess(
                name=label,
                argv=service_argv(name, nats_url=nats_url, cluster=c, extra=extra),
                log_dir=log_dir,
                kind=name,
                cluster=c if name in PER_CLUSTER else "",
                env=_environment(
                    None if passwords is None else _credentials(identity(name, c), passwords),
                    environment,
                ),
            )
            for label, name, extra, c in specs
            if only is None or name in only
        ]
        self._readers: list[asyncio.Task[None]] = []

    @property
    def gateway_address(self) -> str:
        (gateway,) = [s for s in self.services if s.name == "gateway"]
        return gateway.addresses["gateway"]

    async def start(self, *, stall_s: float = STALL_S) -> None:
        """Start every service and wait until each serves, for as long as they progress
        (`muster.launcher.progress`): LaunchError once nothing moved for `stall_s`, or at
        once when one exits."""
        for svc in self.services:
            await self._spawn(svc)
        up: set[str] = set()
        serving = asyncio.create_task(self._wait_all_serving(up))
        progress = Progress(stall_s=stall_s)
        loop = asyncio.get_running_loop()
        try:
            while not (await asyncio.wait({serving}, timeout=_LOOK_S))[0]:
                starting = [s for s in self.services if s.name not in up]
                used = sum(_cpu_s_of(s) for s in starting)
                if not progress.still_moving(up=len(up), cpu_s=used, now_s=loop.time()):
                    late = ", ".join(s.name for s in starting)
                    raise LaunchError(
                        f"services stopped progressing on their way up (none came up and "
                        f"they used under {progress.moving_cpu_s:g}s of CPU in {stall_s:g}s): "
                        f"{late}; logs in {self.log_dir}"
                    )
            serving.result()
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)

    async def _wait_all_serving(self, up: set[str]) -> None:
        """Wait for each service to serve, adding its name to `up`."""
        for svc in self.services:
            await self._wait_serving(svc)
            up.add(svc.name)

    async def _spawn(self, svc: ServiceProcess) -> None:
        svc.starts += 1
        # Its own session, as the nats-server's: a terminal's Ctrl-C reaches the launcher
        # alone, which stops every service in order. A service that took it too died under a
        # launcher still starting it, and asyncio then printed "Unknown child process pid N"
        # (its close() reaped the child before its watcher could). One that outlives the
        # launcher (`muster up`'s, whose supervisor has a session of its own, no terminal)
        # stays in its process group instead: `muster down` finds it there.
        svc.process = await asyncio.create_subprocess_exec(
            *(svc.argv if self._outlive else tied_to_launcher(svc.argv)),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=svc.env,
            start_new_session=not self._outlive,
        )  # fmt: skip
        if self._spawned is not None:
            self._spawned(svc)
        svc.reader = asyncio.create_task(self._read(svc))
        self._readers.append(svc.reader)

    async def _read(self, svc: ServiceProcess) -> None:
        """Copy the service's output to its log, noting the addresses it announces."""
        # This run's: a restart has its own.
        process, announced, log_path = svc.process, svc.announced, svc.log_path
        assert process is not None
        assert process.stdout is not None
        with log_path.open("ab") as log:
            async for line in process.stdout:
                log.write(line)
                log.flush()
                match = _ANNOUNCE.match(line)
                if match:
                    svc.addresses[match.group(1).decode()] = match.group(2).decode()
                    if "health" in svc.addresses and (
                        svc.name != "gateway" or "gateway" in svc.addresses
                    ):
                        announced.set()
        announced.set()  # exited: let waiters see it

    async def _wait_serving(self, svc: ServiceProcess) -> None:
        await svc.announced.wait()
        assert svc.process is not None
        if svc.process.returncode is not None or "health" not in svc.addresses:
            raise await svc.exit_error()
        async with grpc.aio.insecure_channel(svc.addresses["health"]) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    reply = await stub.Check(health_pb2.HealthCheckRequest(service=""))
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                if svc.process.returncode is not None:
                    raise await svc.exit_error()
                await asyncio.sleep(0.05)

    def service(self, name: str) -> ServiceProcess:
        (found,) = [s for s in self.services if s.name == name]
        return found

    async def kill(self, name: str) -> None:
        """SIGKILL service `name` (a crash, as far as everything else can tell); wait for it."""
        proc = self.service(name).process
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()

    async def restart(self, name: str, *, timeout_s: float | None = None) -> None:
        """Start service `name` again with the same flags (as Kubernetes restarts a pod) and
        wait until it serves (a restarted admission replica waits for its lease, then
        rebuilds: no time limit unless `timeout_s`). LaunchError if it exits first."""
        svc = self.service(name)
        svc.addresses.clear()
        svc.announced = asyncio.Event()
        await self._spawn(svc)
        try:
            async with asyncio.timeout(timeout_s):
                await self._wait_serving(svc)
        except TimeoutError:
            raise LaunchError(f"{name} did not serve again in {timeout_s:g}s") from None

    def cpu_s(self, kind: str, clusters: Collection[str]) -> float:
        """CPU seconds the `kind` services of `clusters` used so far (0 for one not running)."""
        return sum(_cpu_s_of(s) for s in self.services if s.kind == kind and s.cluster in clusters)

    def died(self) -> list[str]:
        return [
            s.name for s in self.services if s.process and s.process.returncode not in (None, 0)
        ]

    async def stop_cluster(self, cluster: str, *, grace_s: float = 10.0) -> list[str]:
        """Stop the per-cluster services of `cluster` (it disappears); their names."""
        gone = [s for s in self.services if s.cluster == cluster]
        await self._terminate([s for s in reversed(gone) if s.process is not None], grace_s)
        return [s.name for s in gone]

    async def stop(self, *, grace_s: float = 10.0) -> None:
        """SIGTERM in reverse start order, wait for a graceful exit, kill what remains."""
        running = [s for s in reversed(self.services) if s.process is not None]
        await self._terminate(running, grace_s)
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)

    async def _terminate(self, services: Sequence[ServiceProcess], grace_s: float) -> None:
        running = [s.process for s in services if s.process is not None]
        for proc in running:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        for proc in running:
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
