"""`muster run` stopped by Ctrl-C while it connects to NATS starts nothing more."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from muster.launcher import run


class Admin:
    closed = False

    async def close(self) -> None:
        self.closed = True


def test_a_ctrl_c_swallowed_while_connecting_stops_the_run_before_any_service(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A newcomer's Ctrl-C during start-up ended in "gateway exited at start (status 1)": nats-py
    # had swallowed the cancellation (Python 3.11) and the services started against a
    # nats-server the same Ctrl-C had stopped.
    admin = Admin()

    async def connect_swallowing_the_cancel(*_: Any) -> Admin:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        # Swallowed, as `asyncio.wait_for` may do in 3.11 when its wait ends at that moment.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(1)
        return admin

    def no_services(**_: Any) -> None:
        raise AssertionError("services started after Ctrl-C")

    monkeypatch.setattr(run, "prepare_nats", connect_swallowing_the_cancel)
    monkeypatch.setattr(run, "Stack", no_services)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(
            run.run_live(
                "",
                about="test",
                nats_url="nats://127.0.0.1:1",
                speed=1.0,
                shards=1,
                cluster="local",
                until_s=None,
                log_dir=tmp_path,
                render_queues=lambda _status: "",
            )
        )
    assert admin.closed
