"""When a launcher's binder stores `bound`: only for binds where the launcher starts every
binder, gang-permit and gateway its NATS server sees (`SOLE_BINDERS_BOUND_EVENTS`), unless the
operator's MUSTER_BINDER_BOUND_EVENTS says otherwise; the other services are not told."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from muster.launcher.stack import (
    BOUND_EVENTS_VARIABLE,
    SOLE_BINDERS_BOUND_EVENTS,
    BoundEvents,
    Stack,
)

ROOT = Path(__file__).parents[3]


def flags(stack: Stack) -> dict[str, list[str]]:
    """Each service's `--bound-events` values."""
    return {
        s.name: [s.argv[i + 1] for i, a in enumerate(s.argv) if a == "--bound-events"]
        for s in stack.services
    }


def stack(
    tmp_path: Path,
    *,
    bound_events: BoundEvents | None = None,
    environment: dict[str, str] | None = None,
    workers: tuple[str, ...] = (),
) -> Stack:
    return Stack(
        nats_url="nats://127.0.0.1:4222", cluster="local", shards=2, speed=1, log_dir=tmp_path,
        bound_events=bound_events, environment=environment, workers=workers,
    )  # fmt: skip


def test_a_launcher_that_starts_every_reader_tells_each_binder_alone_to_bind_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(BOUND_EVENTS_VARIABLE, raising=False)
    told = flags(stack(tmp_path, bound_events=SOLE_BINDERS_BOUND_EVENTS, workers=("w1",)))
    assert SOLE_BINDERS_BOUND_EVENTS == "binds"
    assert told.pop("binder") == ["binds"]
    assert told.pop("binder-w1") == ["binds"]  # a worker cluster's binder too
    assert all(v == [] for v in told.values()), told


def test_without_a_mode_the_binder_keeps_its_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(BOUND_EVENTS_VARIABLE, raising=False)
    assert flags(stack(tmp_path))["binder"] == []


@pytest.mark.parametrize("where", ["launcher", "stack"])
def test_the_operator_s_variable_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.delenv(BOUND_EVENTS_VARIABLE, raising=False)
    environment: dict[str, str] | None = None
    if where == "launcher":
        monkeypatch.setenv(BOUND_EVENTS_VARIABLE, "all")
    else:
        environment = {BOUND_EVENTS_VARIABLE: "all"}
    running = stack(tmp_path, bound_events=SOLE_BINDERS_BOUND_EVENTS, environment=environment)
    assert flags(running)["binder"] == []  # the binder reads the variable itself


def test_compose_s_binder_binds_only_beside_gang_permit_and_a_gateway_of_its_image() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    argv = compose["binder"]["command"]
    assert argv[argv.index("--bound-events") + 1] == SOLE_BINDERS_BOUND_EVENTS
    images = {compose[n].get("image") for n in ("binder", "gangpermit", "gateway")}
    assert images == {"muster:dev"}
