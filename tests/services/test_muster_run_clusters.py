"""`muster run` with a scenario that declares MultiKueue: each worker cluster runs its own
services as processes; one is stopped at its `muster.dev/lost-at-seconds` and its workload
finishes on the other."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_muster_run import permission_violations

SCENARIO = Path(__file__).parents[1] / "scenarios" / "multicluster" / "cluster-lost.yaml"


@pytest.mark.timeout(240)
def test_a_lost_workers_workload_finishes_on_the_other_worker() -> None:
    run = [sys.executable, "-m", "muster.cli.main", "run", "--scenario", str(SCENARIO)]
    done = subprocess.run([*run, "--speed", "5"], capture_output=True, text=True, timeout=230)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "15 service processes" in out
    assert "worker clusters: east, west (and local)" in out
    assert re.search(r"ml/train +admitted +global on default in cluster east", out)
    assert "cluster east lost: stopped sim-cluster-east, watcher-east, binder-east, " in out
    assert re.search(r"ml/train +evicted +ClusterLost", out)
    assert re.search(r"ml/train +admitted +global on default in cluster west", out)
    table = out.split("\nWORKLOAD ", 1)[1].split("\n\n", 1)[0]
    rows = {row.split()[0]: row.split() for row in table.splitlines()[1:]}
    assert rows["ml/train"][4] == "west"  # after "main → global"
    assert rows["ml/train"][-3:] == ["Finished", "(evicted", "1x)"]
    assert rows["ml/late"][4] == "west"
    assert len(re.findall(r"ml/train +finished", out)) == 1
    log_dir = re.search(r"logs in (\S+)", out)
    assert log_dir is not None
    # Every cluster's services ran as that cluster's NATS users, and stayed within them.
    assert permission_violations(Path(log_dir.group(1))) == []
