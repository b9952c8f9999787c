"""A minimal service on muster's runtime, run as a subprocess by test_bus_service.py.

On `workload.submitted` it publishes `workload.running` (the handler started), works for
`--work-seconds`, then publishes `workload.pending` (the handler finished). A submission of
`ns/crash` makes another of its loops die; one of `ns/crash-apart` a task it started apart
(`supervised`); one of `ns/hang` makes its handler wait for ever after `workload.running` (a
wedged handler, for the liveness tests); one of `ns/stop-ticking` makes its timer loop, which
ticks every 0.1 s, wait for ever (a wedged timer).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from muster.bus import Bus, new_event, workload_subject
from muster.bus.pulse import Pulse
from muster.bus.service import Health, add_common_flags, config_from_args, run_service
from muster.bus.supervision import SupervisedGroup, supervised
from muster.contracts.v1 import events_pb2
from muster.contracts.v1.events_pb2 import Envelope


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tiny")
    add_common_flags(parser)
    parser.add_argument("--work-seconds", type=float, default=0.0)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args, "tiny")
    except ValueError as exc:
        parser.error(str(exc))
    cluster = config.cluster

    async def serve(bus: Bus, health: Health) -> None:
        crash, crash_apart, stop_ticking = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def crashes(crash: asyncio.Event) -> None:  # a loop of the service that dies
            await crash.wait()
            raise RuntimeError("a loop of tiny died")

        async def ticks(pulse: Pulse) -> None:  # a timer loop: a tick every 0.1 s
            while not stop_ticking.is_set():
                pulse.beat(0.1)
                await asyncio.sleep(0.1)
            await asyncio.Event().wait()  # never set: the timer is wedged

        tripwires = {
            "ns/crash": crash,
            "ns/crash-apart": crash_apart,
            "ns/stop-ticking": stop_ticking,
        }

        async def on_submitted(env: Envelope) -> None:
            if env.workload in tripwires:
                tripwires[env.workload].set()
                return
            started = new_event(
                "running", events_pb2.WorkloadRunning(), cluster=cluster,
                workload=env.workload, cause=env, source="tiny",
            )  # fmt: skip
            await bus.publish(started)
            if env.workload == "ns/hang":
                await asyncio.Event().wait()  # never set: the handler is wedged
            await asyncio.sleep(args.work_seconds)  # the work a real handler would do
            done = new_event(
                "pending", events_pb2.WorkloadPending(reason="Tiny"), cluster=cluster,
                workload=env.workload, cause=env, source="tiny",
            )  # fmt: skip
            await bus.publish(done)

        apart = supervised(crashes(crash_apart), name="tiny-apart")
        async with SupervisedGroup() as loops:
            loops.create_task(
                bus.consume("tiny", [workload_subject(cluster, "submitted")], on_submitted),
                name="tiny-events",
            )
            loops.create_task(crashes(crash), name="tiny-crashes")
            loops.create_task(ticks(bus.pulses.pulse("tiny-timer")), name="tiny-timer")
            health.ready()
        apart.cancel()

    return run_service(config, serve)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
