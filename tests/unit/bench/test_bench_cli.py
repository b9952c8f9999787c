"""`muster bench` end to end at a tiny scale: sections, options and the JSON rows."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from muster.cli import bench
from muster.cli.main import main as muster

TINY = "0.001"  # one workload per class per ClusterQueue
EVERY_SECTION_S = 600  # a dozen service stacks, on 2 loaded cores
E2E_SHARDS = 2  # the shared run's e2e cases: a count other than the default's first
SOAK_WAVES = 2  # the shared run's soak: a census after one wave and after the next

ROW_FIELDS = {
    "section",
    "config",
    "scale",
    "workloads",
    "cluster_queues",
    "cohorts",
    "admissions",
    "wall_s",
    "decisions_per_s",
    "waits",
    "mean_usage_pct",
    "max_usage_pct",
    "preemptions",
    "finished",
    "makespan_s",
}


def json_rows(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_admission_prints_one_json_row_with_the_workload_size(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = muster(["bench", "admission", "--config", "baseline", "--scale", TINY, "-o", "json"])

    (row,) = json_rows(capsys.readouterr().out)
    assert status == 0
    assert set(row) == ROW_FIELDS
    assert (row["section"], row["config"], row["scale"]) == ("admission", "baseline", 0.001)
    assert (row["workloads"], row["cluster_queues"], row["cohorts"]) == (90, 30, 5)
    assert row["admissions"] >= row["workloads"] == row["finished"]
    assert set(row["waits"]) == {"small", "medium", "large"}
    for waits in row["waits"].values():
        assert waits["workloads"] == waits["admitted"] == 30
        assert 0 <= waits["p50_s"] <= waits["p99_s"] <= waits["max_s"]
    assert 0 <= row["mean_usage_pct"] <= 100
    assert 0 < row["max_usage_pct"] <= 100
    assert row["wall_s"] > 0
    assert row["decisions_per_s"] > 0


@pytest.mark.timeout(EVERY_SECTION_S)
def test_config_all_runs_every_configuration_in_order(
    every_section: tuple[int, list[dict[str, Any]]],
) -> None:
    _, rows = every_section  # admission with no --config: every configuration, as alone

    rows = of(rows, "admission")
    assert [(r["config"], r["workloads"], r["cluster_queues"]) for r in rows] == [
        ("baseline", 90, 30),
        ("large-scale", 3000, 1000),
        ("hierarchical-fair", 3000, 1000),
    ]
    assert all(r["max_usage_pct"] <= 100 for r in rows)


def test_scale_changes_the_workload_count(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["admission", "--config", "baseline", "--scale", "0.01", "-o", "json"])

    (row,) = json_rows(capsys.readouterr().out)
    assert row["workloads"] == 30 * (4 + 1 + 1)  # 350, 100, 50 per ClusterQueue, scaled
    assert row["scale"] == 0.01


@pytest.fixture(scope="module")
def every_section() -> tuple[int, list[dict[str, Any]]]:
    """`muster bench --scale TINY -o json` once for the module: (exit status, its rows). The
    tests of a section that this run covers at the same options read their rows from it
    instead of starting the same service stacks again."""
    from muster.bench import chaos, e2e, soak

    every, soak_run, chaos_run = e2e.run, soak.run, chaos.run
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        # One shard count keeps this short (each case starts every service); E2E_SHARDS, so
        # that replicas other than the lone one run (the default's first count is 1).
        patch.setattr(
            e2e,
            "run",
            lambda *, shard_counts, **options: every(shard_counts=(E2E_SHARDS,), **options),
        )
        patch.setattr(soak, "run", lambda *, scale, waves: soak_run(scale=scale, waves=SOAK_WAVES))
        # Chaos's run without faults only: its run with faults is services/test_chaos.py's, at
        # 23 times the workloads and with more checks (every kind killed, NATS restarted). That
        # the section runs both, the same but for faults: test_chaos_runs_without_then_with_*.
        patch.setattr(chaos, "run", lambda **options: itertools.islice(chaos_run(**options), 1))
        status = muster(["bench", "--scale", TINY, "-o", "json"])
    return status, json_rows(out.getvalue())


@pytest.mark.timeout(EVERY_SECTION_S)  # the first test to ask runs every_section
def test_no_section_runs_every_section(
    every_section: tuple[int, list[dict[str, Any]]],
) -> None:
    status, rows = every_section
    assert status == 0
    assert {r["section"] for r in rows} == set(bench.SECTIONS)
    assert [r["config"] for r in rows if r["section"] == "admission"] == [
        "baseline",
        "large-scale",
        "hierarchical-fair",
    ]
    # Every Job, on one cluster and over MultiKueue's three workers, was bound.
    multicluster = of(rows, "multicluster")
    assert [(r["case"], r["clusters"]) for r in multicluster] == [("single", 1), ("multikueue", 3)]
    assert all(r["bound"] == r["jobs"] == 6 for r in multicluster)
    assert multicluster[1]["vs_single_pct"] > 0
    # The sections that have no run of their own below: each did its work at this scale.
    assert [(r["workloads"], r["events"] > 0) for r in of(rows, "book")] == [(10, True), (50, True)]
    assert all(r["bound"] == r["pods"] > 0 for r in of(rows, "placement-e2e"))
    (chaos,) = of(rows, "chaos")  # the run without faults (every_section)
    assert (chaos["faults"], chaos["kills"], chaos["nats_restarts"]) == (False, {}, 0)
    assert chaos["lost"] == chaos["stuck"] == chaos["twice"] == 0 == len(chaos["exits"])
    kube = of(rows, "kube")
    assert {r["measure"] for r in kube} == {"watch-list", "watch-stream", "status-writes",
                                           "event-writes"}  # fmt: skip
    assert all(r["per_s"] > 0 for r in kube)
    (live,) = of(rows, "kueue-live")
    assert (live["workloads"], live["finished"], live["lost"]) == (90, 90, 0)


def test_soak_rows_tell_each_process_rss_and_maps_after_each_wave(
    every_section: tuple[int, list[dict[str, Any]]],
) -> None:
    _, rows = every_section
    soak = of(rows, "soak")
    processes = ["sim-cluster", "watcher", "binder", "gangpermit", "admission-0", "preemption",
                 "gateway", "nats-server"]  # fmt: skip
    assert [(r["wave"], r["workloads"], r["process"]) for r in soak] == [
        (wave, 10 * wave, p) for wave in (1, 2) for p in processes
    ]
    assert all(r["answered"] and r["rss_mb"] > 0 for r in soak)
    # Each workload ran, finished and was deleted: the binder remembers each one's end.
    binder = [r["maps"] for r in soak if r["process"] == "binder"]
    ended = "muster.core.submissions.EndedSubmissions._ended"
    assert [maps.get(ended) for maps in binder] == [10, 20]


def test_chaos_runs_without_then_with_faults_the_same_workloads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from muster.bench import chaos

    ran: list[chaos.ChaosConfig] = []

    async def recorded(config: chaos.ChaosConfig) -> chaos.ChaosConfig:
        ran.append(config)
        return config  # printed as the row: what is checked is what each run was asked

    monkeypatch.setattr(chaos, "run_chaos", recorded)
    assert muster(["bench", "chaos", "--scale", TINY, "--seed", "3", "-o", "json"]) == 0
    without, with_faults = ran
    assert (without.faults, with_faults.faults) == (False, True)
    assert msgspec.structs.replace(without, faults=True) == with_faults
    assert (without.workloads, without.seed) == (10, 3)  # 300, scaled, at least 10

    ran.clear()
    assert muster(["bench", "chaos", "--scale", TINY, "--faults-only", "-o", "json"]) == 0
    assert [config.faults for config in ran] == [True]


def of(rows: list[dict[str, Any]], section: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["section"] == section]


def test_e2e_shards_option_reaches_the_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    from muster.bench import e2e

    asked: list[tuple[float, tuple[int, ...], tuple[str, ...], str]] = []

    def recorded(
        *, scale: float, shard_counts: tuple[int, ...], observe: tuple[str, ...], manifest: str
    ) -> Iterator[Any]:
        asked.append((scale, shard_counts, observe, manifest))
        return iter(())

    monkeypatch.setattr(e2e, "run", recorded)
    bench.main(["e2e", "--scale", TINY, "--shards", "2", "4", "-o", "json"])
    bench.main(["e2e", "--scale", TINY, "--manifest", "json", "-o", "json"])

    assert asked == [
        (0.001, (2, 4), ("off",), "yaml"),
        (0.001, (1, 2, 4), ("off",), "json"),
    ]


def test_e2e_json_manifests_submit_the_workloads_of_the_yaml_ones() -> None:
    from muster.bench import e2e
    from muster.gateway.submit import plan_submit

    for per_call in (1, e2e.BATCHED_PER_CALL):
        workloads = range(3, 3 + per_call)
        planned = {
            manifest: plan_submit(
                e2e.manifest_of(workloads, manifest), cluster="local", submission="same"
            )
            for manifest in e2e.MANIFESTS
        }
        assert [p.key for p in planned["json"]] == [f"bench/w-{i}" for i in workloads]
        assert planned["json"] == planned["yaml"]


@pytest.mark.timeout(EVERY_SECTION_S)
def test_e2e_rows_tell_mode_shards_and_workloads_per_call(
    every_section: tuple[int, list[dict[str, Any]]],
) -> None:
    _, rows = every_section  # its e2e cases ran at E2E_SHARDS

    rows = of(rows, "e2e")
    assert [(r["mode"], r["shards"], r["workloads"], r["per_call"]) for r in rows] == [
        ("burst", 2, 30, 1),
        ("burst", 2, 30, 16),
        ("rate", 2, 10, 1),
    ]
    # Went through (admitted and running); BOUND counts the `running` (the launcher's binder
    # tells no `bound` for pods it made on their nodes: `--bound-events binds`).
    assert all((r["admitted"], r["bound"]) == (r["workloads"], r["workloads"]) for r in rows)
    assert all(r["bound_event"] == "running" and r["bound_p50_ms"] > 0 for r in rows)
    # Every process is metered (one replica's share of 30 workloads may be under one 10 ms
    # clock tick; all of them together are not).
    assert all(r["cpu_ms_per_workload"]["admission"] >= 0 for r in rows)
    assert all(r["cpu_ms_per_workload"]["total"] > 0 for r in rows)
    # Each workload's story is several events (submitted, admitted, bound, running, ...), and
    # the same server's own publish+ack rate is measured beside it.
    assert all(r["events_per_workload"] >= 4 for r in rows)
    assert all(r["jetstream_acks_per_s"] > 0 for r in rows)
    assert all(r["rounds"] is None for r in rows)  # metrics off: not read
    # What the server handled, by stream: a simulated pod is written twice (created on its
    # node, started: docs/events.md, "Pods created on their nodes"), and the watcher, the sim
    # kubelet and gang-permit each read the writes. By the time every pod runs, the watcher
    # has read both, the kubelet and gang-permit the first: the second may still be on its
    # way to them.
    for r in rows:
        stored, delivered = r["stored_per_workload"], r["delivered_per_workload"]
        assert stored["KV_MUSTER_SIM_local"] >= 2
        assert delivered["KV_MUSTER_SIM_local"] >= 4
        assert stored["total"] >= r["events_per_workload"] + 2
        assert delivered["total"] > delivered["KV_MUSTER_SIM_local"]


def test_e2e_with_otlp_exports_spans_from_the_services() -> None:
    from muster.bench import e2e
    from muster.bus.service import run_loop

    row = run_loop(e2e.run_case(shards=1, workloads=10, rate_per_s=100.0, observe="otlp"))
    assert (row.observe, row.admitted, row.bound) == ("otlp", 10, 10)  # counted at `running`
    assert row.spans_exported > 0  # every service exported to the bench's receiver
    # With metrics on, what the replica did in the window: rounds of the case's events
    # (`bench.round_counts`; its views, paced, may be written after so short a window), in the
    # CPU table too.
    assert row.rounds is not None
    assert row.rounds.rounds_per_replica >= 1
    assert row.rounds.events_per_round > 0
    cpu_table = e2e.render_cpu([row])
    assert all(c in cpu_table for c in ("ROUNDS/replica", "EVENTS/round", "VIEWS/s/replica"))


@pytest.mark.timeout(EVERY_SECTION_S)
def test_gateway_rows_tell_what_refused_calls_cost(
    every_section: tuple[int, list[dict[str, Any]]],
) -> None:
    _, rows = every_section  # gateway at TINY: one call per case (128, scaled, at least one)

    rows = of(rows, "gateway")
    assert [(r["case"], r["calls"], r["request_mib"], r["answered"]) for r in rows] == [
        ("no credentials", 1, 4.0, "UNAUTHENTICATED"),
        ("unknown bearer token", 1, 4.0, "UNAUTHENTICATED"),
        ("no credentials, again", 1, 4.0, "UNAUTHENTICATED"),
    ]
    assert all(r["baseline_mib"] > 0 for r in rows)


@pytest.mark.parametrize("manifest", ["yaml", "json"])
def test_submit_rows_say_what_each_call_cost_and_store_one_event_per_call(
    capsys: pytest.CaptureFixture[str], manifest: str
) -> None:
    # Its own run at 30 calls, not the shared run's 10: ten calls' gateway CPU can read 0 ms
    # (the process clock's tick), as a CI run did.
    status = muster(["bench", "submit", "--scale", "0.005", "--manifest", manifest, "-o", "json"])

    rows = json_rows(capsys.readouterr().out)
    assert status == 0
    assert [(r["calls"], r["in_flight"], r["stored"], r["manifest"]) for r in rows] == [
        (30, 64, 30, manifest),
        (30, 1, 30, manifest),
    ]
    assert all(r["gateway_ms"] > 0 and r["client_ms"] > 0 and r["calls_per_s"] > 0 for r in rows)
    # One call at a time: each call finds the gateway's gRPC thread asleep and wakes it. With 64
    # in flight a busy thread may take several calls without sleeping (a loaded machine does).
    many, one = rows
    assert many["gateway_switches"] > 0
    assert one["gateway_switches"] >= 1


def test_options_after_the_section_win_over_those_before(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench.main(["-o", "table", "--scale", "1", "admission", "--config", "baseline",
                "--scale", TINY, "-o", "json"])  # fmt: skip

    (row,) = json_rows(capsys.readouterr().out)
    assert row["workloads"] == 90


@pytest.mark.timeout(EVERY_SECTION_S)
def test_table_output_has_a_header_one_line_per_config_and_the_targets(
    every_section: tuple[int, list[dict[str, Any]]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from muster.bench import admission
    from muster.bench.kueue_perf import PerfConfig

    # The configurations as the shared run measured them at TINY (a second run of the two
    # 3 000-workload ones takes seconds and tells nothing new): the table is what this checks.
    _, rows = every_section
    measured = {
        r["config"]: msgspec.convert(r, admission.AdmissionRow) for r in of(rows, "admission")
    }

    def run_config(config: PerfConfig, *, scale: float) -> admission.AdmissionRow:
        assert scale == float(TINY)
        return measured[config.name]

    monkeypatch.setattr(admission, "run_config", run_config)
    bench.main(["admission", "--scale", TINY])

    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "admission"
    header = lines[2].split()
    assert header == [
        "CONFIG",
        "WORKLOADS",
        "CLUSTERQUEUES",
        "ADMISSIONS",
        "WALL(s)",
        "DECISIONS/s",
        "WAIT-SMALL(s)",
        "WAIT-MEDIUM(s)",
        "WAIT-LARGE(s)",
        "MEAN-USAGE%",
        "MAX-USAGE%",
        "PREEMPTIONS",
    ]
    assert lines[3].split()[:3] == ["baseline", "90", "30"]
    assert lines[4].split()[:3] == ["large-scale", "3000", "1000"]
    assert lines[5].split()[:3] == ["hierarchical-fair", "3000", "1000"]
    assert "large-scale: >= 5000 decisions/s:" in out
    assert "hierarchical-fair: >= 5000 decisions/s:" in out
    assert "baseline: mean usage while work waits >= 90 %:" in out
    assert "(counts scaled with --scale; the targets are for scale 1)" in out


@pytest.mark.parametrize("scale", ["0", "-1", "nan", "inf", "many"])
def test_rejects_a_scale_that_is_not_a_positive_number(
    scale: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["admission", "--scale", scale])

    assert exit_info.value.code == 2
    assert "--scale" in capsys.readouterr().err


def test_rejects_an_unknown_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["admission", "--config", "huge"])

    assert exit_info.value.code == 2
    assert "invalid choice: 'huge'" in capsys.readouterr().err


@pytest.mark.timeout(EVERY_SECTION_S)
def test_decode_rows_tell_the_size_and_objects_of_each_case(
    every_section: tuple[int, list[dict[str, Any]]],
) -> None:
    status, rows = every_section  # decode at TINY, as `muster bench decode --scale TINY`

    rows = of(rows, "decode")
    assert status == 0
    heartbeats = [
        f"heartbeat {nodes} nodes, layout {layout} {verb}"
        for nodes in (5, 50)
        for layout in (1, 2)
        for verb in ("encode", "decode")
    ]
    rooms = [f"heartbeat {nodes} nodes, gang-permit room after a bind" for nodes in (5, 50)]
    assert [r["case"] for r in rows] == [
        "yaml 0.001 MiB", "yaml 0.01 MiB", "submit plan 1", *heartbeats, *rooms
    ]  # fmt: skip
    assert [r["objects"] for r in rows] == [4, 36, 1, *[5] * 4, *[50] * 4, 5, 50]
    assert all(r["bytes"] > 0 and r["mib_per_s"] > 0 and r["objects_per_s"] > 0 for r in rows)
    # The tables make the 50-node heartbeat a fraction of each node in full.
    by_case = {r["case"]: r["bytes"] for r in rows}
    layout_1 = by_case["heartbeat 50 nodes, layout 1 encode"]
    assert by_case["heartbeat 50 nodes, layout 2 encode"] < layout_1 / 4


def test_decode_table_names_the_target(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["decode", "--scale", TINY])

    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split() == ["case", "objects", "bytes", "wall", "s", "MiB/s", "objects/s"]
    assert lines[-1].startswith("target >= 10 MiB/s decoding YAML: ")


@pytest.mark.timeout(EVERY_SECTION_S)
def test_kueue_live_runs_the_baseline_through_the_services_beside_its_virtual_makespan(
    every_section: tuple[int, list[dict[str, Any]]],
) -> None:
    from muster.bench.admission import run_config
    from muster.bench.kueue_perf import BASELINE

    status, rows = every_section  # kueue-live's defaults at TINY, as the section alone

    (row,) = of(rows, "kueue-live")
    assert status == 0
    assert (row["section"], row["config"], row["scale"], row["shards"], row["run_from"]) == (
        "kueue-live", "baseline", 0.001, 1, "created"
    )  # fmt: skip
    assert (row["workloads"], row["cluster_queues"], row["cohorts"]) == (90, 30, 5)
    assert (row["finished"], row["lost"]) == (90, 0)
    # The same plan on the virtual clock, in the same run: what the quota itself allows.
    assert row["virtual_makespan_s"] == run_config(BASELINE, scale=0.001).makespan_s
    assert row["wall_s"] >= row["virtual_makespan_s"] * 0.9  # real time: pods ran their time
    assert set(row["admit"]) == {"small", "medium", "large"}
    for latency in row["admit"].values():
        assert latency["workloads"] == latency["admitted"] == 30
        assert 0 <= latency["p50_ms"] <= latency["p99_ms"]
    # Each ClusterQueue asks for 26 cpu against 20 nominal in a cohort of 120: some wait.
    assert 0 < row["mean_usage_pct"] <= 100
    assert set(row["stages_ms"]) == {
        "admitted->gang_permitted",
        "gang_permitted->running",
        "admitted->finished",
    }
    assert row["cpu_s"]["admission"] > 0
