"""Hostile tokens and policy files reloaded while the gateway runs: each is put in place of the
good file as an attacker (or a careless writer) would, and the next call must still be answered
under the last good version, with an error that names the file and what is wrong.

A real gateway on a real nats-server, reading the files from disk as `--tokens-file` and
`--policy-file` do.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

import grpc
import grpc.aio
import pytest
from gateway_helpers import RunningGateway
from security_helpers import USERS, as_user, manifest, secured_gateway, tokens_yaml

from muster.bus import Bus
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(60)
CALL_S = 10.0  # a call that waits longer stalled behind the reload
_names = itertools.count()


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def symlink_loop(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.with_name("loop-b"))
    path.with_name("loop-b").symlink_to(path)


def directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def truncated(path: Path) -> None:
    text = path.read_text()
    path.write_text(text[: text.index("permissions: [submit") + 18])  # mid flow sequence


def emptied(path: Path) -> None:
    path.write_bytes(b"")  # opened with O_TRUNC: the writer has not written yet


def alias_bomb(path: Path) -> None:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    path.write_text("\n".join(lines) + "\nrules: *a9\n")


ATTACKS: dict[str, tuple[str, Callable[[Path], None], str]] = {
    # name: (file, what is done to it, what the error says after the file's path: a pattern)
    "policy-fifo": ("policy.yaml", fifo, "not a regular file"),
    "tokens-fifo": ("tokens.yaml", fifo, "not a regular file"),
    "policy-symlink-loop": ("policy.yaml", symlink_loop, "Too many levels of symbolic links"),
    "tokens-directory": ("tokens.yaml", directory, "(not a regular file|Is a directory)"),
    "policy-truncated": ("policy.yaml", truncated, "invalid YAML"),
    "policy-alias-bomb": ("policy.yaml", alias_bomb, "policy: line 4: invalid YAML"),
    "tokens-emptied": ("tokens.yaml", emptied, "tokens: lists no token, where the last good"),
}


async def submit_as_alice(gw: RunningGateway) -> None:
    """A Submit only alice's token and the policy's team-a rule let through."""
    text = manifest("Job", "team-a", name=f"job-{next(_names)}")
    request = services_pb2.SubmitRequest(manifest=text)
    await gw.gateway.Submit(request, metadata=as_user("alice"), timeout=CALL_S)


@pytest.mark.parametrize("attack", ATTACKS)
async def test_a_hostile_reload_keeps_the_last_good_file_naming_the_problem(
    bus: Bus, tmp_path: Path, caplog: pytest.LogCaptureFixture, attack: str
) -> None:
    name, spoil, problem = ATTACKS[attack]
    path = tmp_path / name
    caplog.set_level(logging.ERROR, logger="muster.gateway.reloading")
    async with secured_gateway(bus, tmp_path) as gw:
        await submit_as_alice(gw)
        spoil(path)
        try:
            await submit_as_alice(gw)  # answered: not stalled, alice still known and allowed
            await submit_as_alice(gw)  # the problem is said once, not per call
        finally:
            unblock(path)

    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said
    assert said[0].startswith(f"keeping the last good {name.split('.')[0]} file")
    assert f"{path}:" in said[0]
    assert re.search(problem, said[0]), said[0]
    assert "team-a" not in said[0]  # the file's content (credentials) is never quoted


async def test_a_spoiled_file_put_right_again_is_read_again(bus: Bus, tmp_path: Path) -> None:
    async with secured_gateway(bus, tmp_path) as gw:
        path = tmp_path / "tokens.yaml"
        symlink_loop(path)
        await submit_as_alice(gw)
        path.unlink()
        path.write_text(tokens_yaml({u: g for u, g in USERS.items() if u != "alice"}))
        with pytest.raises(grpc.aio.AioRpcError) as revoked:
            await submit_as_alice(gw)  # alice's token, revoked by the good file
        assert revoked.value.code() == grpc.StatusCode.UNAUTHENTICATED


def unblock(path: Path) -> None:
    """Open a pipe put in place of the file for writing, and close it: a reader blocked on
    opening it (before the fix, a gateway thread holding the reload's lock) reads nothing and
    goes on, so the test ends either way."""
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(path.lstat().st_mode):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
