"""The modes a launcher tells one kind of service where it starts every service of one version
its NATS server sees: the gateway's `--name-claims submitted` (SOLE_GATEWAYS_CLAIMS) and each
binder's `--bound-events binds` (SOLE_BINDERS_BOUND_EVENTS), unless the operator set the
service's own variable; the other services are not told."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.launcher.stack import (
    BOUND_EVENTS_VARIABLE,
    NAME_CLAIMS_VARIABLE,
    SOLE_BINDERS_BOUND_EVENTS,
    SOLE_GATEWAYS_CLAIMS,
    Stack,
)

ROOT = Path(__file__).parents[3]
# (Stack's keyword, the flag, its variable, the service told, the launchers' mode, another)
MODES = [
    pytest.param("name_claims", "--name-claims", NAME_CLAIMS_VARIABLE, "gateway",
                 SOLE_GATEWAYS_CLAIMS, "kv", id="name-claims"),
    pytest.param("bound_events", "--bound-events", BOUND_EVENTS_VARIABLE, "binder",
                 SOLE_BINDERS_BOUND_EVENTS, "all", id="bound-events"),
]  # fmt: skip


def flags(stack: Stack, flag: str) -> dict[str, list[str]]:
    """Each service's values of `flag`."""
    return {
        s.name: [s.argv[i + 1] for i, a in enumerate(s.argv) if a == flag] for s in stack.services
    }


def stack(tmp_path: Path, **modes: Any) -> Stack:
    """Every service of cluster `local` (two admission shards), with `modes` (Stack's keywords:
    name_claims, bound_events, environment, workers)."""
    return Stack(
        nats_url="nats://127.0.0.1:4222", cluster="local", shards=2, speed=1, log_dir=tmp_path,
        **modes,
    )  # fmt: skip


def test_a_launcher_that_starts_every_reader_tells_each_binder_alone_to_bind_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(BOUND_EVENTS_VARIABLE, raising=False)
    started = stack(tmp_path, bound_events=SOLE_BINDERS_BOUND_EVENTS, workers=("w1",))
    told = flags(started, "--bound-events")
    assert SOLE_BINDERS_BOUND_EVENTS == "binds"
    assert told.pop("binder") == ["binds"]
    assert told.pop("binder-w1") == ["binds"]  # a worker cluster's binder too
    assert all(v == [] for v in told.values()), told


@pytest.mark.parametrize(("keyword", "flag", "variable", "service", "mode", "other"), MODES)
def test_without_a_mode_the_service_keeps_its_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    keyword: str, flag: str, variable: str, service: str, mode: str, other: str,
) -> None:  # fmt: skip
    monkeypatch.delenv(variable, raising=False)
    assert flags(stack(tmp_path), flag)[service] == []


@pytest.mark.parametrize("where", ["launcher", "stack"])
@pytest.mark.parametrize(("keyword", "flag", "variable", "service", "mode", "other"), MODES)
def test_the_operator_s_variable_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str,
    keyword: str, flag: str, variable: str, service: str, mode: str, other: str,
) -> None:  # fmt: skip
    monkeypatch.delenv(variable, raising=False)
    environment: dict[str, str] | None = None
    if where == "launcher":
        monkeypatch.setenv(variable, other)
    else:
        environment = {variable: other}
    running = stack(tmp_path, **{keyword: mode}, environment=environment)
    assert flags(running, flag)[service] == []  # the service reads the variable itself


def test_compose_s_binder_binds_only_beside_gang_permit_and_a_gateway_of_its_image() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    argv = compose["binder"]["command"]
    assert argv[argv.index("--bound-events") + 1] == SOLE_BINDERS_BOUND_EVENTS
    images = {compose[n].get("image") for n in ("binder", "gangpermit", "gateway")}
    assert images == {"muster:dev"}
