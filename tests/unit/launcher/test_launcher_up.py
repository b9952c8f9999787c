"""`muster up`'s pure parts: the nodes file, the state file and who is still alive."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from muster.launcher.up import DEFAULT_NODES, nodes_of
from muster.launcher.upstate import (
    Process,
    StackState,
    alive,
    process,
    read_state,
    state_dir,
    write_state,
)


def test_the_default_nodes_are_four_ready_nodes_two_with_gpus() -> None:
    nodes = nodes_of(DEFAULT_NODES, source="default")
    assert [n["metadata"]["name"] for n in nodes] == ["node-1", "node-2", "node-3", "node-4"]
    assert [n["status"]["allocatable"].get("nvidia.com/gpu") for n in nodes] == [
        None,
        None,
        "2",
        "2",
    ]


def test_a_nodes_file_names_each_bad_document_and_field() -> None:
    text = "kind: Pod\nmetadata: {name: p}\n---\nkind: Node\nmetadata: {}\n"
    with pytest.raises(ValueError, match=r"nodes\.yaml") as err:
        nodes_of(text, source="nodes.yaml")
    assert str(err.value).splitlines() == [
        "nodes.yaml: document 1: kind: must be Node",
        "nodes.yaml: document 2: metadata.name: is required",
    ]


def test_state_dir_follows_the_flag_then_muster_state_dir_then_xdg(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("MUSTER_STATE_DIR", raising=False)
    assert state_dir() == tmp_path / "xdg" / "muster"
    monkeypatch.setenv("MUSTER_STATE_DIR", str(tmp_path / "env"))
    assert state_dir() == tmp_path / "env"
    assert state_dir(str(tmp_path / "flag")) == tmp_path / "flag"


def test_a_recorded_pid_is_alive_only_with_its_start_time(tmp_path: Path) -> None:
    me = process("test", os.getpid())
    state = StackState(supervisor=me, processes=[me])
    write_state(tmp_path, state)
    assert read_state(tmp_path) == state
    assert alive(me)
    reused = Process(name="old", pid=os.getpid(), started=me.started - 1)  # another process
    assert not alive(reused)
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    gone = process("gone", done.pid)
    done.wait()
    assert not alive(gone)
