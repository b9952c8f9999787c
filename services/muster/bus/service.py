"""The runtime every service's `__main__` uses: flags, logging, tracing, health, signals, shutdown.

```python
def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="muster service binder")
    add_common_flags(parser)
    args = parser.parse_args(argv)
    return run_service(config_from_args(args, "binder"), serve)  # serve(bus, health)
```

`run_service` connects, ensures the streams, serves `grpc.health.v1.Health`, runs `main` and
reports SERVING once `main` calls `health.ready()`. Liveness is reported apart, under the
service name "liveness": SERVING unless a consume loop stalled (bus/watchdog.py, after
`--stall-seconds` with work waiting and nothing moving) or a timer loop is that long past its
due tick (bus/pulse.py). On SIGTERM/SIGINT: NOT_SERVING, cancel
`main` (consume loops stop pulling and finish in-flight handlers), wait up to the grace period,
drain NATS, exit 0. If `main` raises, the service exits 1: run consumer loops in one
`asyncio.TaskGroup` inside `main`, so one dead loop stops the whole service; a task started
apart is started `supervised` (bus/supervision.py): its failure ends the service too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import cProfile
import gc
import logging
import os
import signal
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NamedTuple, TypeVar

import grpc
import msgspec
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from prometheus_client import CollectorRegistry, ProcessCollector

from muster.api.files import special_file
from muster.bus.connection import Bus, BusConfig, connect, nats_outage
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES
from muster.bus.errors import SetupError
from muster.bus.logfmt import setup_logging
from muster.bus.permissions import inbox_of
from muster.bus.redact import register
from muster.bus.subjects import DEFAULT_CLUSTER, check_cluster
from muster.bus.supervision import Supervisor, supervise
from muster.bus.tracing import setup_tracing
from muster.bus.watchdog import watch_progress
from muster.metrics.bus import BusMetrics
from muster.metrics.server import serve_metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

EXIT_OK = 0
PROFILE_DIR_ENV = "MUSTER_PROFILE_DIR"  # set: every service runs under cProfile, stats dumped here
EXIT_FAILED = 1
EVENT_LOOP_ENV = "MUSTER_EVENT_LOOP"  # "asyncio": the standard loop even when uvloop is installed
# A start that NATS cut short is made again after this long, twice as long each time after.
START_RETRY_FIRST_S = 0.5
START_RETRY_MAX_S = 5.0
# Stopping: NATS unreachable this long ends the wait for in-flight work (see
# `_finished_unless_nats_gone`), which is then given this long to end once cancelled again.
NATS_GONE_S = 1.0
ABANDON_S = 2.0
STOP_POLL_S = 0.1
CLOSE_S = 2.0  # the connection's drain at exit, at most (then it is closed)
# Allocations between two young-generation collections (CPython's default: 700). See `tune_gc`.
GC_YOUNG_THRESHOLD = 20_000


class ServiceConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What every service is told at start: who it is, where NATS is, health and shutdown."""

    name: str  # "admission", "binder", ...: logs, health service name, NATS connection name
    bus: BusConfig
    cluster: str = DEFAULT_CLUSTER
    health_host: str = "127.0.0.1"
    health_port: int = 0  # 0: any free port, printed as "health: <host>:<port>" on stdout
    grace_s: float = 10.0  # how long in-flight work may take to finish after SIGTERM
    log_level: str = "INFO"
    # /metrics on the health host; None: no metrics (nothing counted); 0: any free port, printed
    # as "metrics: <host>:<port>" on stdout.
    metrics_port: int | None = None
    # A consume loop with work waiting and nothing moving this long is stalled: liveness
    # says NOT_SERVING (bus/progress.py). 0: never judged.
    stall_s: float = 60.0

    def __post_init__(self) -> None:
        check_cluster(self.cluster)
        if not 0 <= self.health_port <= 65535:
            raise ValueError(f"health port must be in 0..65535, got {self.health_port}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics port must be in 0..65535, got {self.metrics_port}")
        if self.grace_s < 0:
            raise ValueError(f"grace seconds must be >= 0, got {self.grace_s:g}")
        if not self.stall_s >= 0:
            raise ValueError(f"stall seconds must be >= 0 (0: off), got {self.stall_s:g}")
        if self.log_level.upper() not in logging.getLevelNamesMapping():
            raise ValueError(f"unknown log level {self.log_level!r}")


class Flag(NamedTuple):
    """One service option; it defaults to its MUSTER_* environment variable, then `default`."""

    flag: str
    metavar: str
    kind: Callable[[str], Any]
    env: str
    default: str | None
    about: str


# The binder's and gang-permit's memory of ended submissions (`core.submissions`): a late
# decision about a workload that ended this long ago (in the stream's time) is still refused.
ENDED_KEPT_FLAG = Flag(
    "--ended-kept-seconds",
    "S",
    float,
    "MUSTER_ENDED_KEPT_SECONDS",
    "900",
    "a workload that finished or was deleted is remembered this long, so that a late or "
    "redelivered decision about it does not start or stop its pods",
)

COMMON_FLAGS = (
    Flag("--nats", "URL", str, "MUSTER_NATS_URL", "nats://127.0.0.1:4222",
         "NATS server URL(s), comma-separated"),
    Flag("--nats-creds", "FILE", str, "MUSTER_NATS_CREDS", None, "NATS credentials file"),
    Flag("--nats-user", "NAME", str, "MUSTER_NATS_USER", None, "NATS user"),
    Flag("--nats-password", "SECRET", str, "MUSTER_NATS_PASSWORD", None, "NATS password"),
    Flag("--nats-token", "SECRET", str, "MUSTER_NATS_TOKEN", None, "NATS token"),
    Flag("--nats-tls-ca", "FILE", str, "MUSTER_NATS_TLS_CA", None,
         "CA certificate to verify the NATS server with"),
    Flag("--nats-tls-cert", "FILE", str, "MUSTER_NATS_TLS_CERT", None,
         "client certificate for NATS (its subject names the service's NATS user)"),
    Flag("--nats-tls-key", "FILE", str, "MUSTER_NATS_TLS_KEY", None,
         "private key of --nats-tls-cert"),
    Flag("--nats-connect-timeout", "S", float, "MUSTER_NATS_CONNECT_TIMEOUT", "10",
         "give up when NATS is not reachable this long at start"),
    Flag("--cluster", "ID", str, "MUSTER_CLUSTER", DEFAULT_CLUSTER, "cluster id"),
    Flag("--health-host", "ADDR", str, "MUSTER_HEALTH_HOST", "127.0.0.1",
         "address the gRPC health service listens on (0.0.0.0 in a pod, for kubelet probes)"),
    Flag("--health-port", "N", int, "MUSTER_HEALTH_PORT", "0",
         "gRPC health port; 0 picks a free one and prints it"),
    Flag("--grace-seconds", "S", float, "MUSTER_GRACE_SECONDS", "10",
         "time to finish in-flight work after SIGTERM"),
    Flag("--max-event-bytes", "N", int, "MUSTER_MAX_EVENT_BYTES", str(DEFAULT_MAX_EVENT_BYTES),
         "largest event accepted"),
    Flag("--stall-seconds", "S", float, "MUSTER_STALL_SECONDS", "60",
         "liveness NOT_SERVING when a consumer has work waiting and nothing moved this long, "
         "or a timer loop is this long past its due tick (0: off)"),
    Flag("--log-level", "LEVEL", str, "MUSTER_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR"),
    Flag("--stream-replicas", "N", int, "MUSTER_STREAM_REPLICAS", "1",
         "servers holding each stream and bucket muster creates (3 on a NATS cluster of 3)"),
    Flag("--metrics-port", "N", int, "MUSTER_METRICS_PORT", None,
         "serve Prometheus metrics on http://<health host>:N/metrics (0: any free port, "
         "printed); unset: no metrics"),
)  # fmt: skip


def file_flag(value: str) -> str:
    """A FILE flag's value, refused when it names a pipe, socket, device or directory: read
    at start, a pipe held the service there for ever (nothing listening, nothing logged)."""
    why = special_file(value)
    if why is not None:
        raise argparse.ArgumentTypeError(f"{value}: {why}")
    return value


def add_flags(
    group: argparse._ArgumentGroup | argparse.ArgumentParser, flags: Sequence[Flag]
) -> None:
    """Add `flags`; string defaults go through `kind`, so a bad environment value is reported
    like a bad flag."""
    for f in flags:
        shown = "" if f.default is None or "SECRET" in f.metavar else ", default %(default)s"
        group.add_argument(
            f.flag,
            metavar=f.metavar,
            type=file_flag if f.metavar == "FILE" else f.kind,
            default=os.environ.get(f.env) or f.default,
            help=f"{f.about} ({f.env}{shown})",
        )


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """Add the flags every service takes; each defaults to its MUSTER_* environment variable."""
    add_flags(parser.add_argument_group("common service options"), COMMON_FLAGS)


def parse_service(
    argv: Sequence[str],
    *,
    name: str,
    description: str,
    flags: Sequence[Flag] = (),
    make: Callable[[argparse.Namespace, ServiceConfig], T],
) -> tuple[ServiceConfig, T]:
    """Parse the common flags plus `flags`; `make` turns them into the service's own config.
    A bad value (`make` raises ValueError) exits with status 2 and the message."""
    parser = argparse.ArgumentParser(prog=f"muster service {name}", description=description)
    add_common_flags(parser)
    if flags:
        add_flags(parser.add_argument_group(f"{name} options"), flags)
    args = parser.parse_args(list(argv))
    try:
        config = config_from_args(args, name)
        return config, make(args, config)
    except ValueError as exc:
        parser.error(str(exc))  # exits 2


def service_main(
    argv: Sequence[str],
    *,
    name: str,
    description: str,
    flags: Sequence[Flag] = (),
    build: Callable[[argparse.Namespace, ServiceConfig], ServiceMain],
) -> int:
    """The whole `__main__` of a service: parse (see `parse_service`), run until SIGTERM."""
    config, main = parse_service(argv, name=name, description=description, flags=flags, make=build)
    return run_service(config, main)


def config_from_args(args: argparse.Namespace, name: str) -> ServiceConfig:
    """The ServiceConfig of service `name` from flags added by `add_common_flags`.

    Raises ValueError with a message for the user when a value is invalid.
    """
    return ServiceConfig(
        name=name,
        bus=bus_config_from_args(args, name),
        cluster=args.cluster,
        health_host=args.health_host,
        health_port=args.health_port,
        grace_s=args.grace_seconds,
        log_level=args.log_level.upper(),
        metrics_port=args.metrics_port,
        stall_s=args.stall_seconds,
    )


def bus_config_from_args(args: argparse.Namespace, name: str) -> BusConfig:
    """The connection part of `config_from_args`: all a command that is no service needs
    (`muster nats-setup`), so a service's new flag never breaks it."""
    return BusConfig(
        url=args.nats,
        creds_file=args.nats_creds,
        user=args.nats_user,
        password=args.nats_password,
        token=args.nats_token,
        tls_ca_file=args.nats_tls_ca,
        tls_cert_file=args.nats_tls_cert,
        tls_key_file=args.nats_tls_key,
        name=f"muster-{name}",
        inbox_prefix=inbox_of(name, args.cluster),
        max_event_bytes=args.max_event_bytes,
        connect_timeout_s=args.nats_connect_timeout,
        stream_replicas=args.stream_replicas,
    )


LIVENESS = "liveness"  # the health service name livenessProbes ask (`service:` in deploy/)


class Health:
    """The service's `grpc.health.v1` status: NOT_SERVING until `ready()`, again at shutdown.

    Reported both for the overall server ("") and for the service's own name. `detail` says
    in words what the status cannot (`starting: waiting for NATS (<step>)`), for the log.
    Liveness is apart (`LIVENESS`, `alive`): a service may be alive and not ready, and the
    other way round once its work stopped moving.
    """

    def __init__(self, service_name: str) -> None:
        self.servicer = HealthServicer()
        self._names = ("", service_name)
        self._serving = False
        self._alive: bool | None = None  # not told yet
        self._updates: set[asyncio.Task[None]] = set()
        self.detail = "starting"
        self.was_ready = False  # since the last `starting()`

    @property
    def serving(self) -> bool:
        return self._serving

    def starting(self) -> None:
        """A start begins (again): not ready yet."""
        self.was_ready = False

    def ready(self) -> None:
        """Report SERVING: call once the service has caught up and can do its work."""
        self.detail = "serving"
        self.was_ready = True
        self._set(serving=True)

    def waiting(self, detail: str) -> None:
        """Report NOT_SERVING while the service cannot start or work, saying why."""
        self.detail = detail
        self._set(serving=False)

    def not_serving(self) -> None:
        """Report NOT_SERVING (at shutdown, or while a service cannot work)."""
        self._set(serving=False)

    def alive(self, alive: bool) -> None:
        """Report liveness: SERVING, or NOT_SERVING while a consume loop is stalled."""
        if alive != self._alive:
            self._alive = alive
            self._tell(LIVENESS, serving=alive)

    def _set(self, *, serving: bool) -> None:
        self._serving = serving
        for name in self._names:
            self._tell(name, serving=serving)

    def _tell(self, name: str, *, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        task = asyncio.get_running_loop().create_task(self.servicer.set(name, status))
        self._updates.add(task)
        task.add_done_callback(self._updates.discard)

    async def settle(self) -> None:
        """Wait until every status change so far is visible to health checks."""
        await asyncio.gather(*self._updates)


ServiceMain = Callable[[Bus, Health], Coroutine[Any, Any, None]]
"""A service's body: runs until cancelled (then finishes in-flight work and returns)."""


def run_service(config: ServiceConfig, main: ServiceMain) -> int:
    """Run service `main` until SIGTERM/SIGINT or until it fails; the process's exit status."""
    register(config.bus.password, config.bus.token)  # masked in every log line (bus/redact.py)
    setup_logging(config.name, config.log_level)
    setup_tracing(config.name)
    tune_gc()
    profile_dir = os.environ.get(PROFILE_DIR_ENV)
    if not profile_dir:
        return run_loop(serve(config, main))
    return _profiled(profile_dir, config, main)


def tune_gc() -> None:
    """Leave what start-up built out of every later collection, and collect less often.

    A service allocates a few dozen objects per event, nearly all freed by reference counting
    at once; at CPython's default threshold the cyclic collector still ran every few events and
    took about 5 % of the gateway's CPU under a burst (py-spy). Frozen, the imported modules'
    objects (kubernetes, protobuf, grpc) are no longer walked by the full collections either.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, on uvloop when it is installed and MUSTER_EVENT_LOOP is not "asyncio".

    Services spend much of their CPU in the event loop (a few NATS round trips per event);
    uvloop's loop costs about half as much per wakeup. It is optional: without it, asyncio's.
    """
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if os.environ.get(EVENT_LOOP_ENV, "") != "asyncio":
        try:
            import uvloop  # optional: see the docstring
        except ImportError:
            pass
        else:
            factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def _profiled(profile_dir: str, config: ServiceConfig, main: ServiceMain) -> int:
    """`run_service` under cProfile; the stats go to `<dir>/<service>-<pid>.prof` at exit.

    Opt-in (MUSTER_PROFILE_DIR) and for measurements only: cProfile slows a service down.
    """
    path = os.path.join(profile_dir, f"{config.name}-{os.getpid()}.prof")
    os.makedirs(profile_dir, exist_ok=True)
    profiler = cProfile.Profile(time.thread_time)  # CPU time of the event loop thread
    profiler.enable()
    try:
        return run_loop(serve(config, main))
    finally:
        profiler.disable()
        profiler.dump_stats(path)
        log.info("profile written to %s", path)


async def serve(config: ServiceConfig, main: ServiceMain) -> int:
    """`run_service` inside a running event loop (logging and tracing already set up)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    health = Health(config.name)
    health.not_serving()
    health.alive(True)  # from the start: stalls are judged once ready
    await health.settle()
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.servicer, server)
    port = server.add_insecure_port(f"{config.health_host}:{config.health_port}")
    await server.start()
    print(f"health: {config.health_host}:{port}", flush=True)
    log.info("starting; health on %s:%d", config.health_host, port)
    metrics, stop_metrics = None, None
    try:
        if config.metrics_port is not None:
            try:
                metrics, stop_metrics = _serve_metrics(config)
            except OSError as exc:
                where = f"{config.health_host}:{config.metrics_port}"
                log.error("cannot serve metrics on %s: %s", where, exc)
                return EXIT_FAILED
        return await _run_connected(config, main, health, stop, metrics)
    finally:
        health.not_serving()
        await health.settle()
        await server.stop(grace=0.5)
        if stop_metrics is not None:
            stop_metrics()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def _serve_metrics(config: ServiceConfig) -> tuple[BusMetrics, Callable[[], None]]:
    """The service's registry (with the process's CPU and memory), served on the health host."""
    assert config.metrics_port is not None
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    metrics = BusMetrics(registry, service=config.name)
    port, stop = serve_metrics(registry, host=config.health_host, port=config.metrics_port)
    print(f"metrics: {config.health_host}:{port}", flush=True)
    log.info("metrics on http://%s:%d/metrics", config.health_host, port)
    return metrics, stop


async def _run_connected(
    config: ServiceConfig,
    main: ServiceMain,
    health: Health,
    stop: asyncio.Event,
    metrics: BusMetrics | None = None,
) -> int:
    try:
        bus = await _unless_stopped(connect(config.bus, metrics=metrics), stop)
    except ConnectionError as exc:
        log.error("cannot connect to NATS: %s", exc)
        return EXIT_FAILED
    if bus is None:
        return EXIT_OK
    watchdog = None
    if config.stall_s > 0:
        watching = watch_progress(
            bus, stall_s=config.stall_s, alive=health.alive, ready=lambda: health.serving
        )
        watchdog = asyncio.create_task(watching, name="watchdog")
    try:
        return await _start_until_up(config, main, bus, health, stop)
    finally:
        if watchdog is not None:
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog
        await bus.close(drain_s=CLOSE_S)


async def _start_until_up(
    config: ServiceConfig, main: ServiceMain, bus: Bus, health: Health, stop: asyncio.Event
) -> int:
    """Set up and run `main`; a start that NATS cut short is made again, after a back-off.

    Until `main` reports ready, a NATS outage (`nats_outage`: a restart, an unreachable
    server) ends the attempt, and `main` starts over from the beginning: each service's start
    is re-entrant (its durable consumers are made or kept, its rebuild starts afresh, its
    lease waits for its own last one to expire). What is not an outage still exits 1: a
    refused permission, a setup the user may not make, a lease lost, a bug.
    """
    delay_s = START_RETRY_FIRST_S
    while True:
        denied = len(bus.denied)
        outage = await _attempt(config, main, bus, health, stop)
        if isinstance(outage, int):
            return outage
        if len(bus.denied) > denied:
            log.error("NATS refused a permission: %s", bus.denied[-1], exc_info=outage)
            return EXIT_FAILED
        health.waiting(f"starting: waiting for NATS ({_step_of(outage)})")
        log.warning("%s; starting again in %gs", health.detail, delay_s)
        if await _unless_stopped(asyncio.sleep(delay_s, result=False), stop) is None:
            log.info("stopped while starting")
            return EXIT_OK
        delay_s = min(2 * delay_s, START_RETRY_MAX_S)


async def _attempt(
    config: ServiceConfig, main: ServiceMain, bus: Bus, health: Health, stop: asyncio.Event
) -> int | BaseException:
    """One start: the exit status, or the NATS outage that ended it before it was ready."""
    try:
        if await _unless_stopped(_ensure_streams(bus), stop) is None:
            log.info("stopped while starting")
            return EXIT_OK
    except SetupError as exc:
        log.error("%s", exc)
        return EXIT_FAILED
    except Exception as exc:
        if nats_outage(exc):
            return exc
        log.exception("cannot create or update the streams")
        return EXIT_FAILED
    return await _run_main(config, main(bus, health), bus, health, stop)


async def _ensure_streams(bus: Bus) -> bool:
    await bus.ensure_streams()
    return True


def _step_of(exc: BaseException) -> str:
    """What a start was doing when NATS went away, from the error that ended it: the bus's
    errors name it (`consumer admission-0: nats: timeout`)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return str(exc) or repr(exc)


async def _unless_stopped(work: Coroutine[Any, Any, T], stop: asyncio.Event) -> T | None:
    """The result of `work`, or None when `stop` is set first (`work` is then cancelled)."""
    task = asyncio.create_task(work)
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return None
    return task.result()


async def _run_main(
    config: ServiceConfig,
    body: Coroutine[Any, Any, None],
    bus: Bus,
    health: Health,
    stop: asyncio.Event,
) -> int | BaseException:
    """Run `body` until it ends or `stop` is set; then cancel it and give it the grace period.

    The exit status, or the NATS outage (`nats_outage`) that ended `body` before it was ready.
    """
    health.starting()
    supervisor = Supervisor()  # every task `body` starts inherits it (bus/supervision.py)
    context = contextvars.copy_context()
    context.run(supervise, supervisor)
    task = asyncio.create_task(body, name=f"{config.name}-main", context=context)
    stopped = asyncio.create_task(stop.wait())
    failed = asyncio.create_task(supervisor.failed.wait())
    await asyncio.wait({task, stopped, failed}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    failed.cancel()
    supervisor.stopping = True
    was_ready = health.was_ready
    health.not_serving()
    if supervisor.error is not None and not task.done():
        return await _end_failed(config, task, bus, supervisor, was_ready=was_ready)
    if not task.done():
        log.info("stopping: finishing in-flight work (up to %gs)", config.grace_s)
        task.cancel()
        if not await _finished_unless_nats_gone(task, bus, config.grace_s):
            task.cancel()  # handlers are cancelled; their messages are redelivered
            if not bus.nc.is_connected:
                await bus.abandon()  # what they wait for NATS for fails now
            await asyncio.wait({task}, timeout=ABANDON_S)
            if not task.done():
                log.warning("in-flight work did not stop in %gs; exiting without it", ABANDON_S)
                return EXIT_OK
        if task.cancelled():
            log.info("stopped")
            return EXIT_OK
    if task.cancelled():
        log.error("stopped: the service was cancelled")
        return EXIT_FAILED
    exc = task.exception()
    if exc is not None:
        if not was_ready and nats_outage(exc):
            return exc
        log.error("stopped: the service failed", exc_info=exc)
        return EXIT_FAILED
    log.info("stopped: the service finished")
    return EXIT_OK


async def _end_failed(
    config: ServiceConfig,
    task: asyncio.Task[None],
    bus: Bus,
    supervisor: Supervisor,
    *,
    was_ready: bool,
) -> int | BaseException:
    """A supervised task of `task` failed: stop `task` within the grace period; exit 1, or
    the NATS outage to start again from when it came before the service was ready."""
    assert supervisor.error is not None
    outage = not was_ready and nats_outage(supervisor.error)
    if not outage:
        log.error("stopping: task %s failed; the service ends", supervisor.task)
    task.cancel()
    if not await _finished_unless_nats_gone(task, bus, config.grace_s):
        task.cancel()
        await asyncio.wait({task}, timeout=ABANDON_S)
    return supervisor.error if outage else EXIT_FAILED


async def _finished_unless_nats_gone(task: asyncio.Task[None], bus: Bus, grace_s: float) -> bool:
    """Wait up to `grace_s` for `task`; whether it finished. With NATS unreachable for
    `NATS_GONE_S` meanwhile, stop waiting: what the task still has to send cannot arrive,
    and what it did not ack comes back to the next replica."""
    deadline = time.monotonic() + grace_s
    gone_since: float | None = None
    while not task.done():
        now = time.monotonic()
        if now >= deadline:
            log.warning("in-flight work took longer than %gs; abandoning it", grace_s)
            return False
        if bus.nc.is_connected:
            gone_since = None
        elif gone_since is None:
            gone_since = now
        elif now - gone_since >= NATS_GONE_S:
            log.warning(
                "NATS unreachable for %gs while stopping; abandoning in-flight work", NATS_GONE_S
            )
            return False
        await asyncio.wait({task}, timeout=min(STOP_POLL_S, deadline - now))
    return True
