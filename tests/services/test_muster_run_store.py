"""`muster run`'s store: a run starts empty, whatever a killed run left in its log directory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from muster.launcher.run import LaunchError, fresh_store, run_live
from muster.sim.demo import DEMO_YAML


class _StartedError(Exception):
    """Raised from the run's first line: the nats-server is up, no service started yet."""


def _leave_a_killed_runs_store(log_dir: Path) -> Path:
    """What a SIGKILLed run leaves: its JetStream directory, with a stream's files in it (a
    stream this run does not create, so its presence can only be the old run's)."""
    stream = log_dir / "jetstream" / "jetstream" / "$G" / "streams" / "LEFT_BY_A_KILLED_RUN"
    stream.mkdir(parents=True)
    (stream / "meta.inf").write_text("{}")
    return stream


@pytest.mark.timeout(60)
def test_a_store_a_killed_run_left_is_not_read_by_the_next_run(tmp_path: Path) -> None:
    old = _leave_a_killed_runs_store(tmp_path)
    (tmp_path / "nats-server.log").write_text("the killed run's log\n")
    lines: list[str] = []
    seen_when_serving: list[bool] = []

    def out(line: str) -> None:
        lines.append(line)
        if line.startswith("muster run: ") and "NATS nats://" in line:
            seen_when_serving.append(old.exists())
            raise _StartedError

    with pytest.raises(_StartedError):
        asyncio.run(
            run_live(
                DEMO_YAML,
                about="demo",
                nats_url=None,
                speed=40,
                shards=1,
                cluster="local",
                until_s=None,
                log_dir=tmp_path,
                render_queues=str,
                out=out,
            )
        )

    assert seen_when_serving == [False]  # the server started on an empty store
    assert lines[0] == (
        f"muster run: removed {tmp_path / 'jetstream'}, a previous run's store (a run starts empty)"
    )
    assert (tmp_path / "nats-server.log").exists()  # the logs stay: only the store goes


def test_an_empty_log_directory_says_nothing(tmp_path: Path) -> None:
    lines: list[str] = []
    assert fresh_store(tmp_path, lines.append) == tmp_path / "jetstream"
    assert lines == []


def test_a_log_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "logs"
    path.write_text("not a directory")
    with pytest.raises(LaunchError, match=r"log directory .*logs: is not a directory"):
        fresh_store(path, print)
    assert path.read_text() == "not a directory"


def test_a_store_that_is_a_link_is_removed_not_what_it_points_at(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep")
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "jetstream").symlink_to(elsewhere)

    fresh_store(log_dir, lambda _: None)

    assert not (log_dir / "jetstream").exists()
    assert (elsewhere / "precious").read_text() == "keep"


def test_a_log_directory_others_may_write_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    store = _leave_a_killed_runs_store(log_dir)
    log_dir.chmod(0o777)
    with pytest.raises(
        LaunchError, match=r"log directory refused: .*logs may be written by others"
    ):
        fresh_store(log_dir, print)
    assert store.exists()
