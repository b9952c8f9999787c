"""A service process that exits at start, as `muster run` and `muster bench chaos` see it: the
error says how it exited and ends with its log, and each start has a log of its own, so a
restart that fails does not hide why the one before it did."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from muster.launcher.nats_server import LaunchError
from muster.launcher.stack import Stack

pytestmark = pytest.mark.timeout(60)


async def test_each_start_keeps_its_own_log_and_an_exit_at_start_says_why(
    tmp_path: Path,
) -> None:
    # Refused at its first flag check: no NATS is needed for it to exit at start.
    stack = Stack(
        nats_url="nats://127.0.0.1:1",
        cluster="local",
        shards=1,
        speed=1,
        log_dir=tmp_path,
        only={"admission"},
        service_args={"admission": ["--cluster-lost-seconds", "0"]},
    )
    try:
        with pytest.raises(LaunchError) as first:
            await stack.start()
        with pytest.raises(LaunchError) as again:
            await stack.restart("admission-0")
    finally:
        await stack.stop()

    why = "--cluster-lost-seconds must be > 0, got 0"
    assert str(first.value).startswith(
        f"admission-0 exited at start (status 2); see {tmp_path / 'admission-0.log'}\n"
    )
    assert why in str(first.value)  # the end of its log, in the error itself
    assert str(again.value).startswith(
        f"admission-0 exited at start (status 2); see {tmp_path / 'admission-0.1.log'}\n"
    )
    assert why in (tmp_path / "admission-0.log").read_text()
    assert why in (tmp_path / "admission-0.1.log").read_text()
    assert (tmp_path / "admission-0.log").read_text().count(why) == 1  # not appended to


async def test_a_start_that_stops_progressing_fails_naming_the_service(tmp_path: Path) -> None:
    """A service stuck on its way up (here: its NATS accepts the connection and never says a
    word) fails the start once it used next to no CPU for `stall_s`, however long its
    imports took before that (no fixed bound: at load they take tens of seconds)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    port = silent.getsockname()[1]
    stack = Stack(
        nats_url=f"nats://127.0.0.1:{port}",
        cluster="local",
        shards=1,
        speed=1,
        log_dir=tmp_path,
        only={"binder"},
    )
    try:
        with pytest.raises(LaunchError) as stalled:
            await stack.start(stall_s=2.0)
    finally:
        await stack.stop()
        silent.close()

    assert str(stalled.value).startswith("services stopped progressing on their way up")
    assert str(stalled.value).endswith(f": binder; logs in {tmp_path}")
