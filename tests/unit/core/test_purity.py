"""muster.core decides without I/O, clocks or randomness: it imports none of them."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import muster.core

CORE = Path(muster.core.__file__).parent
FORBIDDEN_MODULES = {
    "time",
    "random",
    "asyncio",
    "os",
    "logging",
    "socket",
    "subprocess",
    "threading",
}


def _core_files() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: p.name)
def test_core_module_imports_no_io_clock_or_randomness(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    offending = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            offending += [a.name for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in FORBIDDEN_MODULES:
                offending.append(node.module)
        elif isinstance(node, ast.Attribute) and node.attr in {"now", "utcnow", "today"}:
            offending.append(f"line {node.lineno}: .{node.attr}()")
    assert offending == []


# What core may import at all: the rest of muster is reached only through api, and of third
# parties only msgspec (api's structs) and numpy (placement's node table). The import-linter
# contracts in pyproject.toml name what it must never reach; this lists what it may.
ALLOWED_THIRD_PARTY = {"msgspec", "numpy"}


def _imported(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: p.name)
def test_core_module_imports_only_api_core_the_standard_library_msgspec_and_numpy(
    path: Path,
) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    offending = [
        name
        for name in _imported(tree)
        if not (
            name.split(".")[0] in sys.stdlib_module_names
            or name.split(".")[0] in ALLOWED_THIRD_PARTY
            or name.startswith(("muster.api", "muster.core"))
        )
    ]
    assert offending == []
