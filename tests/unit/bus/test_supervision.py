"""Which ends of a supervised task are a crash of the service (bus/supervision.py): one that
raised is, named in the log; one its owner cancelled, one raising what its owner handles
(admission's Reown), and one that returned are not."""

from __future__ import annotations

import asyncio

import pytest

from muster.bus.supervision import SupervisedGroup, Supervisor, supervise, supervised


class RebuildError(Exception):
    """What an owner awaits and handles (as admission does a Reown)."""


async def fails(error: BaseException) -> None:
    await asyncio.sleep(0)
    raise error


async def test_a_task_that_raised_fails_the_service_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    supervisor = Supervisor()
    supervise(supervisor)
    task = supervised(fails(RuntimeError("a bug")), name="follower")
    await asyncio.wait_for(supervisor.failed.wait(), 5)
    assert supervisor.task == "follower"
    assert task.done()
    assert "task follower failed: RuntimeError('a bug')" in caplog.text


async def test_a_task_of_a_supervised_group_that_raised_is_named() -> None:
    supervisor = Supervisor()
    supervise(supervisor)

    async def service() -> None:
        async with SupervisedGroup() as tasks:
            tasks.create_task(fails(RuntimeError("a bug")), name="heartbeat")
            tasks.create_task(asyncio.Event().wait(), name="consumer")

    with pytest.raises(ExceptionGroup):
        await service()
    assert supervisor.task == "heartbeat"


async def test_what_the_owner_handles_cancels_or_awaits_to_its_end_is_no_crash() -> None:
    supervisor = Supervisor()
    supervise(supervisor)
    rebuilt = supervised(fails(RebuildError()), name="admission-events", expected=(RebuildError,))
    returned = supervised(asyncio.sleep(0), name="once")

    async def raises_on_its_way_out() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("last snapshot not written") from None

    stopped = supervised(raises_on_its_way_out(), name="admission-snapshots")
    await asyncio.sleep(0)
    stopped.cancel()
    await asyncio.gather(rebuilt, returned, stopped, return_exceptions=True)
    await asyncio.sleep(0)  # done callbacks run
    assert not supervisor.failed.is_set()
