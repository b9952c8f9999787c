"""bench.connz: each process's messages in and out, from nats-server's `/connz` answers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from muster.bench.connz import (
    ConnTraffic,
    kind_of,
    per_workload,
    process_of,
    render,
    syscalls,
    traffic_of,
)


def conn(name: str, *, in_msgs: int, out_msgs: int, subs: dict[str, int]) -> dict[str, Any]:
    return {
        "name": name,
        "in_msgs": in_msgs,
        "in_bytes": 100 * in_msgs,
        "out_msgs": out_msgs,
        "out_bytes": 10 * out_msgs,
        "subscriptions_list_detail": [{"subject": s, "msgs": n} for s, n in subs.items()],
    }


def test_a_connection_s_process_is_its_name_without_muster_or_the_floor_s_prefix() -> None:
    assert process_of("muster-gateway") == "gateway"
    assert process_of("muster-floor-gateway") == "gateway"
    assert process_of("muster-bench") == "bench"


def test_a_subscription_is_a_request_inbox_a_plain_inbox_or_a_subject() -> None:
    assert kind_of("_INBOX.abc.*") == "replies"
    assert kind_of("_INBOX.abc") == "inbox"
    assert kind_of("muster.v1.local.pulse") == "subject"


def test_connections_of_one_name_are_summed_and_received_messages_split_by_kind() -> None:
    answer = {
        "connections": [
            conn("muster-binder", in_msgs=5, out_msgs=6, subs={"_INBOX.a.*": 3, "_INBOX.b": 3}),
            conn("muster-binder", in_msgs=1, out_msgs=2, subs={"muster.v1.x": 2}),
            {"in_msgs": 1},  # unnamed: counted apart
        ]
    }
    traffic = traffic_of(answer)
    assert traffic["binder"].counts == {
        "in_msgs": 6,
        "in_bytes": 600,
        "out_msgs": 8,
        "out_bytes": 80,
        "replies": 3,
        "inbox": 3,
        "subject": 2,
        "read_calls": 0,
        "write_calls": 0,
    }
    assert traffic["?"].counts["in_msgs"] == 1


def test_growth_per_workload_per_process_a_new_connection_from_zero_a_closed_one_left_out() -> None:
    before = traffic_of(
        {
            "connections": [
                conn("muster-gateway", in_msgs=10, out_msgs=10, subs={}),
                conn("muster-gone", in_msgs=10, out_msgs=10, subs={}),
            ]
        }
    )
    after = traffic_of(
        {
            "connections": [
                conn("muster-gateway", in_msgs=30, out_msgs=40, subs={"_INBOX.a.*": 20}),
                conn("muster-floor-binder", in_msgs=5, out_msgs=0, subs={}),
            ]
        }
    )
    rows = per_workload(before, after, 10)
    assert set(rows) == {"gateway", "binder"}
    assert rows["gateway"]["in_msgs"] == 2.0
    assert rows["gateway"]["out_msgs"] == 3.0
    assert rows["gateway"]["replies"] == 2.0
    assert rows["binder"]["in_msgs"] == 0.5


def test_the_table_has_a_row_per_process_and_field_with_a_column_per_case() -> None:
    quiet = {"preemption": dict.fromkeys(("in_msgs", "out_msgs"), 0.0)}
    text = render(
        [
            ("floor", {"binder": {"in_msgs": 5.0, "out_msgs": 6.0}, **quiet}),
            ("e2e", {"binder": {"in_msgs": 5.06, "out_msgs": 6.01}, **quiet}),
        ]
    )
    lines = text.splitlines()
    assert lines[0].split() == ["CONNECTION/workload", "floor", "e2e"]
    assert lines[1].split() == ["binder", "in_msgs", "5", "5.06"]
    assert "preemption" not in text  # no traffic in any case


def test_counts_compare_equal_as_structs() -> None:
    assert ConnTraffic(counts={"in_msgs": 1}) == ConnTraffic(counts={"in_msgs": 1})


def test_a_process_s_system_calls_grow_with_its_reads_and_a_gone_one_is_left_out(
    tmp_path: Path,
) -> None:
    pids = {"admission-0": os.getpid(), "gone": 2**22 + 7}  # above the kernel's pid_max
    before = syscalls(pids)
    path = tmp_path / "f"
    path.write_text("x")
    for _ in range(5):
        path.read_text()
    after = syscalls(pids)
    assert set(after) == {"admission"}
    assert after["admission"]["read_calls"] - before["admission"]["read_calls"] >= 5
    assert after["admission"]["write_calls"] > before["admission"]["write_calls"]
