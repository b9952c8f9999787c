"""muster.core decides without I/O, clocks or randomness: it imports none of them."""

from __future__ import annotations

import ast
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
