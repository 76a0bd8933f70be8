"""A hung rank on the namespace cluster (2 hosts x 2 ranks, real sshd, real torchrun on gloo):
ddptui marks the stall while it happens, takes the ranks' stacks, answers `ddptui stacks`,
and the run ends within the process group's timeout with the hung rank named first."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import Cluster
from jobs import ddptui, marked_pids, run_id_of, spawn_ddptui, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun, pytest.mark.timeout(300)]

HANG_RANK = 3
#: Long enough for the test to ask for a stack while the run is stuck, short for CI.
PG_TIMEOUT_S = 25

# Every rank prints a line a step; one rank stops before the collective of step 3.
HANGING = r'''
import datetime, os, time
import torch
import torch.distributed as dist

def wait_forever():
    while True:
        time.sleep(3600)

dist.init_process_group("gloo", timeout=datetime.timedelta(
    seconds=float(os.environ["JOB_PG_TIMEOUT"])))
r = dist.get_rank()
t = torch.ones(1)
for i in range(1000):
    print(f"step {i} on rank {r}", flush=True)
    if r == int(os.environ["JOB_HANG_RANK"]) and i == 3:
        wait_forever()
    dist.all_reduce(t)
    time.sleep(0.2)
'''


def hosts_file(c: Cluster, tmp: Path) -> Path:
    """In a folder of its own: the project synced to the nodes is the script's folder."""
    tmp = tmp / "job"
    tmp.mkdir()
    (tmp / "job.py").write_text(HANGING)
    d: dict[str, Any] = {
        "defaults": {"python": sys.executable, "nproc_per_node": 2,
                     "env": {"JOB_PG_TIMEOUT": str(PG_TIMEOUT_S),
                             "JOB_HANG_RANK": str(HANG_RANK)}},
        "nodes": [{"host": h.name, "workdir": str(tmp / f"work-{h.name}")} for h in c.hosts],
        "rendezvous": {"port": 29811},
        "job": {"script": "job.py"},
        "ssh": {"config_file": str(c.ssh_config), "known_hosts": str(c.known_hosts),
                "connect_timeout": 5},
        "health": {"stall_after": 3},
    }
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def test_a_hung_rank_is_marked_its_stack_taken_and_named_when_the_run_ends(
        cluster2: Cluster, tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "run.out"
    proc = spawn_ddptui("run", str(hosts_file(cluster2, tmp_path)), "--headless", state=state,
                        out=out)
    try:
        seen = wait_for(out, "stalled:", 150, proc)
        run_id = run_id_of(seen)
        t_stall = time.monotonic()
        # The engine said it, naming nodes and ranks, while the run is stuck (every rank
        # stops in a collective soon after the hung one: a whole-run stall).
        m = re.search(r"ddptui\] ⚠ the whole run stalled: no rank has printed a line or metric "
                      r"for \d+ s \(ranks (.*?)\); ", seen)
        assert m is not None, seen[-3000:]
        assert sorted(m.group(1).split("; ")) == ["0, 1 on node1", "2, 3 on node2"], m.group(1)

        # Asked for by hand, on the live run: that rank's stack, at the sleeping frame.
        res = ddptui("stacks", run_id, "--rank", str(HANG_RANK), state=state, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"rank {HANG_RANK} on node2 (pid " in res.stdout
        assert "wait_forever (job.py:" in res.stdout
        assert "rank 0 on" not in res.stdout  # only the rank asked for
        assert time.monotonic() - t_stall < PG_TIMEOUT_S, "the run ended before we asked"
        assert proc.wait(PG_TIMEOUT_S + 90) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = out.read_text(errors="replace")
    lines = text.splitlines()

    # The stacks were taken once, by themselves, and read: rank 3 sleeps, the rest wait.
    assert text.count("the ranks' Python stacks (py-spy), saved to ") == 1, text[-4000:]
    assert (f"ddptui: rank {HANG_RANK} on node2 (in wait_forever (job.py:" in text
            and "is in no collective while ranks 0, 1, 2 wait in one" in text), text[-4000:]
    saved = list((state / "runs" / run_id / "stacks").glob("stacks-*.txt"))
    assert len(saved) == 2 and all("wait_forever" in p.read_text() for p in saved)

    # The summary leads with the hung rank, in ddptui's words.
    last_streamed = max(i for i, ln in enumerate(lines) if ln.startswith("["))
    summary = lines[last_streamed + 1:]
    said = "\n".join(ln for ln in lines if " step " not in ln)  # for a failure's message
    assert summary[0].startswith("ddptui: ") and f"rank {HANG_RANK}" in summary[0], said
    assert "timed out waiting" in summary[0], said
    assert marked_pids(run_id) == []
