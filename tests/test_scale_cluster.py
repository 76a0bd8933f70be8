"""The scale cluster under a real run: eight namespace hosts, each with its own sshd.

One ``ddptui run --headless`` of a one-process script on eight nodes: every rank's line
arrives under its own node, and the run ends with exit code 0. It guards what the launch
benchmark (bench/launch.py) relies on at up to 16 hosts, at a size the CI can afford.
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import pytest
import yaml
from cluster import Cluster, ClusterFactory
from jobs import ddptui

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]
HOSTS = 8
SCRIPT = "import os\nprint(f\"hello from rank {os.environ['RANK']}\", flush=True)\n"
_ports = itertools.count(29900)


def test_cluster_of_eight_builds_fast_and_each_host_answers(
        cluster_factory: ClusterFactory) -> None:
    t0 = time.monotonic()
    c: Cluster = cluster_factory(HOSTS)
    built = time.monotonic() - t0
    assert len(set(c.ips)) == HOSTS and c.names == [f"node{i}" for i in range(1, HOSTS + 1)]
    assert built < 20, f"an {HOSTS}-host cluster took {built:.1f} s to build"
    for h in c.hosts:
        assert len(h.sshd_procs) == 1 and h.sshd_procs[0].poll() is None


def test_headless_run_on_eight_hosts_every_rank_speaks(cluster_factory: ClusterFactory,
                                                        tmp_path: Path) -> None:
    c: Cluster = cluster_factory(HOSTS)
    (tmp_path / "job.py").write_text(SCRIPT)
    hosts = {
        "defaults": {"python": sys.executable, "nproc_per_node": 1},
        "nodes": [{"host": h.name, "workdir": str(tmp_path / f"work-{h.name}")}
                  for h in c.hosts],
        "rendezvous": {"backend": "c10d", "port": next(_ports)},
        "job": {"script": "job.py"},
        "ssh": {"config_file": str(c.ssh_config), "known_hosts": str(c.known_hosts),
                "connect_timeout": 10},
    }
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(hosts, sort_keys=False))
    res = ddptui("run", str(path), "--headless", state=tmp_path / "state", timeout=180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    for rank, h in enumerate(c.hosts):
        assert f"[{h.name} r{rank}] hello from rank {rank}" in res.stdout, res.stdout[-3000:]
