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


@pytest.mark.parametrize(
    ("argv", "usage", "complaint"),
    [
        (
            ["workloads", "--staus", "pending"],
            "usage: muster workloads ",
            "muster workloads: error: unrecognized arguments: --staus (did you mean --status?) "
            "pending",
        ),
        (
            ["stop", "clusterqueue", "cq", "--keep-running"],
            "usage: muster stop ",
            "muster stop: error: unrecognized arguments: --keep-running (did you mean "
            "--keep-already-running?)",
        ),
        (["queues", "extra"], "usage: muster queues ", "unrecognized arguments: extra"),
    ],
)
def test_a_mistyped_flag_is_named_with_its_commands_usage_and_the_nearest_flag(
    argv: list[str], usage: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A newcomer's typo once got `muster`'s own usage ("COMMAND ..."), which names no flag.
    with pytest.raises(SystemExit) as caught:
        main(argv)

    err = capsys.readouterr().err
    assert caught.value.code == 2
    assert err.startswith(usage)
    assert err.rstrip().endswith(complaint)


@pytest.mark.parametrize("command", [["workloads"], ["events"], ["queues"]])
def test_no_gateway_listening_says_how_to_start_one_and_prints_nothing_else(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # A newcomer's first `muster workloads` before `muster up`: the gRPC error alone did not say
    # what to do, and `muster events` printed its table header before failing.
    status = main([*command, "--gateway", "127.0.0.1:1", "--timeout", "5"])

    out, err = capsys.readouterr()
    assert status == 1
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("muster: UNAVAILABLE: cannot reach the gateway at 127.0.0.1:1: ")
    assert line.endswith(
        "(nothing listens there: start one with `muster up`, or name it with --gateway or "
        "MUSTER_GATEWAY)"
    )
