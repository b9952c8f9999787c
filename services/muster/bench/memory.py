"""Resident memory of a process, for the sections that report what a case costs in memory."""

from __future__ import annotations

import os


def rss_mib(pid: int | None = None) -> float:
    """The resident memory of process `pid` (this one by default) in MiB (Linux /proc)."""
    pid = os.getpid() if pid is None else pid
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")
