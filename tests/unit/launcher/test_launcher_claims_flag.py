"""How a launcher's gateway claims names: by its `submitted` alone where the launcher starts
every gateway its NATS server sees (`SOLE_GATEWAYS_CLAIMS`), unless the operator's
MUSTER_GATEWAY_NAME_CLAIMS says otherwise; the other services are not told."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from muster.gateway.claims import NameClaims
from muster.launcher.stack import NAME_CLAIMS_VARIABLE, SOLE_GATEWAYS_CLAIMS, Stack

ROOT = Path(__file__).parents[3]
# The services that read `submitted` (docs/events.md, "One-write claims", Readers).
READERS = frozenset({"watcher", "admission", "gangpermit", "binder"})


def flags(stack: Stack) -> dict[str, list[str]]:
    """Each service's `--name-claims` values."""
    return {
        s.name: [s.argv[i + 1] for i, a in enumerate(s.argv) if a == "--name-claims"]
        for s in stack.services
    }


def stack(
    tmp_path: Path,
    *,
    name_claims: NameClaims | None = None,
    environment: dict[str, str] | None = None,
) -> Stack:
    return Stack(
        nats_url="nats://127.0.0.1:4222", cluster="local", shards=1, speed=1, log_dir=tmp_path,
        name_claims=name_claims, environment=environment,
    )  # fmt: skip


def test_a_launcher_that_starts_every_gateway_tells_its_gateway_alone_to_claim_by_submitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(NAME_CLAIMS_VARIABLE, raising=False)
    told = flags(stack(tmp_path, name_claims=SOLE_GATEWAYS_CLAIMS))
    assert SOLE_GATEWAYS_CLAIMS == "submitted"
    assert told.pop("gateway") == ["submitted"]
    assert all(v == [] for v in told.values())


def test_without_a_mode_the_gateway_keeps_its_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(NAME_CLAIMS_VARIABLE, raising=False)
    assert flags(stack(tmp_path))["gateway"] == []


@pytest.mark.parametrize("where", ["launcher", "stack"])
def test_the_operator_s_variable_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.delenv(NAME_CLAIMS_VARIABLE, raising=False)
    environment: dict[str, str] | None = None
    if where == "launcher":
        monkeypatch.setenv(NAME_CLAIMS_VARIABLE, "kv")
    else:
        environment = {NAME_CLAIMS_VARIABLE: "kv"}
    running = stack(tmp_path, name_claims=SOLE_GATEWAYS_CLAIMS, environment=environment)
    assert flags(running)["gateway"] == []  # the gateway reads the variable itself


def test_compose_s_one_gateway_claims_by_submitted_after_every_reader_started() -> None:
    """An upgrade's `docker compose up` replaces each reader of `submitted` before it starts
    the gateway: no reader of before runs beside a gateway that stores named `submitted`."""
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    gateway = compose["gateway"]
    argv = gateway["command"]
    assert argv[argv.index("--name-claims") + 1] == SOLE_GATEWAYS_CLAIMS
    assert gateway.get("deploy", {}).get("replicas", 1) == 1
    readers = {n for n, s in compose.items() if s.get("command", [None, None])[1] in READERS}
    assert readers == {"watcher", "admission-0", "admission-1", "gangpermit", "binder"}
    assert readers | {"nats"} == set(gateway["depends_on"])
