"""How a launcher's gateway claims names: by its `submitted` alone where the launcher starts
every gateway its NATS server sees (`SOLE_GATEWAYS_CLAIMS`); the other services are not told.
Without a mode, or with the operator's MUSTER_GATEWAY_NAME_CLAIMS: test_launcher_mode_flags.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_launcher_mode_flags import flags, stack

from muster.launcher.stack import NAME_CLAIMS_VARIABLE, SOLE_GATEWAYS_CLAIMS

ROOT = Path(__file__).parents[3]
# The services that read `submitted` (docs/events.md, "One-write claims", Readers).
READERS = frozenset({"watcher", "admission", "gangpermit", "binder"})


def test_a_launcher_that_starts_every_gateway_tells_its_gateway_alone_to_claim_by_submitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(NAME_CLAIMS_VARIABLE, raising=False)
    told = flags(stack(tmp_path, name_claims=SOLE_GATEWAYS_CLAIMS), "--name-claims")
    assert SOLE_GATEWAYS_CLAIMS == "submitted"
    assert told.pop("gateway") == ["submitted"]
    assert all(v == [] for v in told.values())


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
