"""`muster` dispatch: subcommands, and `bench` imported only when it runs."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from muster.cli.main import main


def test_bench_hands_its_arguments_to_the_bench_module(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def bench_main(argv: list[str]) -> int:
        seen.append(argv)
        return 3

    bench = types.ModuleType("muster.cli.bench")
    bench.main = bench_main  # type: ignore[attr-defined]  # a stand-in module built at run time
    monkeypatch.setitem(sys.modules, "muster.cli.bench", bench)

    assert main(["bench", "admission", "--workloads", "50000"]) == 3
    assert main(["bench", "--help"]) == 3
    assert seen == [["admission", "--workloads", "50000"], ["--help"]]


def test_importing_the_cli_does_not_import_bench() -> None:
    code = "import sys, muster.cli.main; sys.exit('muster.cli.bench' in sys.modules)"

    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([])

    assert caught.value.code == 2
    assert "COMMAND" in capsys.readouterr().err
