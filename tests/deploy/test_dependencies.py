"""The lock files (requirements/) against pyproject.toml's ranges, and who installs from them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
TARGET = {"python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"}
_PIN = re.compile(
    r"^([A-Za-z0-9_.-]+)==(\S+) \\$((?:\n\s+--hash=sha256:[0-9a-f]{64}(?: \\)?)+)", re.M
)


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: str) -> dict[str, Version]:
    """Package → pinned version of a lock file; every pin must carry hashes."""
    text = (ROOT / "requirements" / lock).read_text()
    found = {_key(m[1]): Version(m[2]) for m in _PIN.finditer(text)}
    listed = [line for line in text.splitlines() if re.match(r"^[A-Za-z0-9]", line)]
    assert len(found) == len(listed), "a pin without hashes"
    return found


def needed(requirements: list[str]) -> list[Requirement]:
    reqs = [Requirement(r) for r in requirements]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(TARGET)]


@pytest.mark.parametrize(
    ("lock", "groups"),
    [("service.txt", ()), ("dev.txt", ("dev", "bench"))],
)
def test_the_lock_pins_every_dependency_within_its_range(
    lock: str, groups: tuple[str, ...]
) -> None:
    pinned = pins(lock)
    wanted = needed(PROJECT["dependencies"])
    for group in groups:
        wanted += needed(PROJECT["optional-dependencies"][group])
    for req in wanted:
        assert _key(req.name) in pinned, f"{req.name} is not in requirements/{lock}: make lock"
        assert req.specifier.contains(pinned[_key(req.name)]), f"{req} vs {lock}: make lock"


def test_service_lock_is_the_dev_locks_subset_at_the_same_versions() -> None:
    service, dev = pins("service.txt"), pins("dev.txt")
    assert {name: dev.get(name) for name in service} == service
    assert "matplotlib" not in service  # benchmarks only: not in the service image
    assert "setuptools" in dev  # muster itself is installed without build isolation


def test_libraries_whose_internals_muster_uses_are_capped() -> None:
    for req in needed(PROJECT["dependencies"]):
        if _key(req.name) in ("nats-py", "kubernetes"):
            assert any(s.operator == "<" for s in req.specifier), req


def test_ci_and_the_image_install_from_the_lock_with_hashes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes -r $(LOCK)" in makefile
    assert "LOCK := requirements/dev.txt" in makefile
    assert "--no-deps --no-build-isolation -e ." in makefile
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "--require-hashes -r /tmp/service.txt" in dockerfile
    assert "--require-hashes -r requirements/dev.txt" in dockerfile  # the build stage only
    final = dockerfile.rsplit("FROM ", 1)[1]
    assert "dev.txt" not in final
    assert re.findall(r"pip install (?!--no-cache-dir --require-hashes)(.*)", final) == [
        "--no-cache-dir --no-deps /wheels/*.whl \\"
    ]
