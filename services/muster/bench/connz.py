"""Every message each client connection sent and received during a bench case, per process.

`bench.wire` counts what JetStream stored and delivered; the server also carries what it does
not store: pull requests, acks, API requests and their replies, PubAcks, heartbeats and the
statuses ending pull requests. nats-server's monitoring endpoint (`/connz?subs=detail`) counts
per connection the messages and bytes it received from the client (`in`: publishes, acks,
pull and API requests) and sent to it (`out`), and per subscription what it delivered. A
connection is named by its client (`muster-<service>`), so the counts add up per process.

What a connection received is split by its subscriptions' kind:
- `replies`: a request-reply inbox (`_INBOX.<id>.*`): PubAcks, API and key-value replies;
- `inbox`: a plain inbox: pull-feed deliveries and the statuses ending pull requests, ordered
  watches' deliveries and their heartbeats and flow control;
- `subject`: core NATS subscriptions on named subjects (pulses, cancellations).

Beside them, each process's read and write system calls (Linux: `/proc/<pid>/io`), the
nats-server's included: the same messages cost the server more when they come and go in more,
smaller reads and writes. Those are read(2)/write(2)-family calls, which Go and uvloop use on
sockets (and the server on its store's files); send/recv calls are not counted.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from muster.bench.table import Column, render_table

KINDS: Final = ("replies", "inbox", "subject")
# In the table, per process: messages and bytes in and out, what came in by kind, syscalls.
SYSCALLS: Final = ("read_calls", "write_calls")
FIELDS: Final = ("in_msgs", "in_bytes", "out_msgs", "out_bytes", *KINDS, *SYSCALLS)
_TIMEOUT_S: Final = 10.0


class ConnTraffic(msgspec.Struct, frozen=True, kw_only=True):
    """One process's connections, summed: messages and bytes in and out so far, and the
    messages received by subscription kind (`KINDS`)."""

    counts: dict[str, int]  # FIELDS -> so far


def kind_of(subject: str) -> str:
    """A subscription's kind (`KINDS`) from its subject."""
    if subject.startswith("_INBOX."):
        return "replies" if subject.endswith(".*") else "inbox"
    return "subject"


def process_of(connection_name: str) -> str:
    """The process a connection belongs to: its name without `muster-` (and the floor's
    stand-ins' `floor-`), as the CPU columns name it."""
    return connection_name.removeprefix("muster-").removeprefix("floor-")


def traffic_of(connz: Mapping[str, Any]) -> dict[str, ConnTraffic]:
    """Per process (`process_of` its connections' name; unnamed: `?`), its connections'
    counts summed, from a `/connz` answer with subscription details."""
    summed: dict[str, dict[str, int]] = {}
    for conn in connz.get("connections") or []:
        process = process_of(str(conn.get("name") or "?"))
        counts = summed.setdefault(process, dict.fromkeys(FIELDS, 0))
        for field in ("in_msgs", "in_bytes", "out_msgs", "out_bytes"):
            counts[field] += int(conn.get(field) or 0)
        for sub in conn.get("subscriptions_list_detail") or []:
            counts[kind_of(str(sub.get("subject", "")))] += int(sub.get("msgs") or 0)
    return {name: ConnTraffic(counts=c) for name, c in sorted(summed.items())}


TrafficReader = Callable[[], Awaitable[dict[str, ConnTraffic]]]


async def read_traffic(
    monitor_url: str, pids: Mapping[str, int] | None = None
) -> dict[str, ConnTraffic]:
    """Every open connection's traffic so far per process, from the server at `monitor_url`,
    with the system calls of `pids` (process label -> pid; `admission-<i>` counted as
    `admission`)."""
    url = f"{monitor_url}/connz?subs=detail&limit=4096"

    def fetch() -> Any:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as answer:
            return json.load(answer)

    traffic = traffic_of(await asyncio.to_thread(fetch))
    for process, calls in syscalls(pids or {}).items():
        was = traffic.get(process)
        counts = dict(was.counts) if was else dict.fromkeys(FIELDS, 0)
        counts.update(calls)
        traffic[process] = ConnTraffic(counts=counts)
    return traffic


def syscalls(pids: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Per process label, its read and write system calls so far; a process gone (or no
    /proc) is left out."""
    out: dict[str, dict[str, int]] = {}
    for name, pid in pids.items():
        label = "admission" if name.startswith("admission-") else name
        try:
            lines = Path(f"/proc/{pid}/io").read_text().splitlines()
        except OSError:
            continue
        io = dict(line.split(": ", 1) for line in lines if ": " in line)
        calls = out.setdefault(label, dict.fromkeys(SYSCALLS, 0))
        calls["read_calls"] += int(io.get("syscr", 0))
        calls["write_calls"] += int(io.get("syscw", 0))
    return out


def per_workload(
    before: Mapping[str, ConnTraffic], after: Mapping[str, ConnTraffic], workloads: int
) -> dict[str, dict[str, float]]:
    """Per process, each field's growth between two readings per workload. A process whose
    connections opened meanwhile counts from 0; one gone meanwhile is left out."""
    rows: dict[str, dict[str, float]] = {}
    for name, now in after.items():
        was = before[name].counts if name in before else {}
        rows[name] = {
            f: round(max(0, v - was.get(f, 0)) / max(workloads, 1), 2)
            for f, v in now.counts.items()
        }
    return rows


def render(cases: list[tuple[str, Mapping[str, Mapping[str, float]]]]) -> str:
    """Per process and field (`<process> <field>`), each case's count per workload, one column
    per (title, `per_workload` answer); a process's rows only where a case has any traffic."""
    processes = sorted(
        {p for _, rows in cases for p, counts in rows.items() if any(counts.values())}
    )
    keys = [(p, f) for p in processes for f in FIELDS]

    def column(title: str, rows: Mapping[str, Mapping[str, float]]) -> Column[tuple[str, str]]:
        return Column(title, lambda key: f"{rows.get(key[0], {}).get(key[1], 0.0):g}")

    columns: list[Column[tuple[str, str]]] = [
        Column("CONNECTION/workload", lambda key: f"{key[0]} {key[1]}", numeric=False),
        *(column(title, rows) for title, rows in cases),
    ]
    return render_table(columns, keys)
