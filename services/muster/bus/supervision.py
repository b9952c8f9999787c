"""A service's long-lived tasks: one that fails ends the service, with a log line naming it.

A task that died with an exception is a crash, not a quiet service: a follow loop, a timer or a
writer that stopped leaves the service answering health checks while its work is no longer
done. `supervised` starts such a task (`watched` takes one a TaskGroup made); when it ends with
an exception, the log says which task, and `run_service` ends the service (exit 1: the
supervisor or the pod restarts it). `run_service` installs the `Supervisor` for every task its
`main` starts (a context variable: tasks inherit it); without one (a test, a CLI command) the
failure is only logged.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class Supervisor:
    """The first failure among a service's supervised tasks, for `run_service` to end on."""

    def __init__(self) -> None:
        self.failed = asyncio.Event()
        self.task = ""  # the name of the task that failed first
        self.error: BaseException | None = None
        self.stopping = False  # once the service stops, tasks failing are not a crash

    def fail(self, task: str, error: BaseException) -> None:
        if not self.failed.is_set():
            self.task, self.error = task, error
            self.failed.set()


_supervisor: contextvars.ContextVar[Supervisor | None] = contextvars.ContextVar(
    "muster_supervisor", default=None
)


def supervise(supervisor: Supervisor) -> None:
    """Make `supervisor` the one of the tasks started from the current context from now on."""
    _supervisor.set(supervisor)


def supervised(
    work: Coroutine[Any, Any, T], *, name: str, expected: tuple[type[BaseException], ...] = ()
) -> asyncio.Task[T]:
    """Start `work` as task `name`, watched (`watched`)."""
    return watched(asyncio.create_task(work, name=name), expected=expected)


def watched(
    task: asyncio.Task[T], *, expected: tuple[type[BaseException], ...] = ()
) -> asyncio.Task[T]:
    """`task`, whose failure (an exception but those in `expected`, which its owner awaits and
    handles) is logged with its name and ends the service."""
    supervisor = _supervisor.get()

    def ended(done: asyncio.Task[T]) -> None:
        if done.cancelled():
            return
        error = done.exception()
        if error is None or isinstance(error, expected):
            return
        # Asked to stop (its owner cancelled it: a shutdown, a rebuild), what it raised on its
        # way out is its owner's to handle, not a crash.
        if done.cancelling() or (supervisor is not None and supervisor.stopping):
            log.info("task %s ended while stopping: %r", done.get_name(), error)
            return
        log.error(
            "task %s failed: %r", done.get_name(), error,
            exc_info=error, extra={"task": done.get_name()},
        )  # fmt: skip
        if supervisor is not None:
            supervisor.fail(done.get_name(), error)

    task.add_done_callback(ended)
    return task


class SupervisedGroup(asyncio.TaskGroup):
    """An `asyncio.TaskGroup` whose tasks are `watched`: the one that failed is named in the
    log (the group's ExceptionGroup does not say which task raised)."""

    def create_task(
        self,
        coro: Generator[Any, None, T] | Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        return watched(super().create_task(coro, name=name, context=context))
