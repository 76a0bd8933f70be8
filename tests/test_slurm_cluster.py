"""The Slurm test harness itself: nodes come up, steps run on the right node, teardown is clean.

One module cluster serves every test here (about 2 s to build); each test cancels its jobs.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time

from conftest import SlurmClusterFactory
from slurmcluster import SlurmCluster

from ddptui.slurm.hostlist import expand


def test_nodes_are_idle_with_their_own_addresses(slurm_cluster: SlurmCluster) -> None:
    c = slurm_cluster
    assert c.nodes == ["sn1", "sn2"]
    out = c.run(["sinfo", "-h", "-N", "-o", "%N %t %P %o"]).stdout.split("\n")
    rows = sorted(line.split() for line in out if line)
    assert rows == [["sn1", "idle", "debug*", c.addresses["sn1"]],
                    ["sn2", "idle", "debug*", c.addresses["sn2"]]]
    nets = {ipaddress.ip_interface(f"{ip}/24").network for ip in c.addresses.values()}
    assert len(nets) == 1 and len(set(c.addresses.values())) == 2
    assert set(c.env) == {"SLURM_CONF", "PATH"}


def test_srun_runs_once_on_each_node(slurm_cluster: SlurmCluster) -> None:
    out = slurm_cluster.run(["srun", "-N2", "hostname"]).stdout
    assert sorted(out.split()) == ["sn1", "sn2"]


def test_step_in_an_allocation_runs_on_the_named_node(slurm_cluster: SlurmCluster) -> None:
    c = slurm_cluster
    job = c.salloc(2)
    try:
        [entry] = c.squeue()
        assert entry["id"] == job and entry["state"] == "RUNNING"
        assert expand(entry["nodes"]) == ["sn1", "sn2"]
        # Hostname (UTS namespace), own address (network namespace: the source address
        # toward the controller), name resolution (private /etc/hosts) and the interpreter
        # (PATH exported by srun), all from one step.
        code = ("import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                "s.connect((sys.argv[1], 9)); "
                "print(socket.gethostname(), s.getsockname()[0], "
                "socket.gethostbyname('sn2'), sys.prefix)")
        out = c.run(["srun", "--overlap", "--jobid", job, "-w", "sn1", "-N1", "-n1",
                     "python3", "-c", code, c.gateway]).stdout.split()
        assert out == ["sn1", c.addresses["sn1"], c.addresses["sn2"], sys.prefix]
    finally:
        c.scancel(job)
    assert c.squeue() == []


def test_scancel_ends_a_running_step(slurm_cluster: SlurmCluster) -> None:
    c = slurm_cluster
    job = c.salloc(1, "-w", "sn1")
    step = subprocess.Popen(
        ["srun", "--overlap", "--jobid", job, "-N1", "-n1", "sleep", "60"],
        env={**os.environ, **c.env},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not c.steps(job) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.steps(job) == [f"{job}.0"]
        assert len(c.node_pids("sn1")) > 1  # slurmd and the step's processes
        c.scancel(job)
        assert step.wait(timeout=15) != 0
        assert c.node_pids("sn1") == [c.daemon_pid("sn1")]
    finally:
        if step.poll() is None:
            step.kill()
            step.wait()
    assert c.squeue() == []


def test_four_nodes_beside_another_cluster_and_nothing_left(
    slurm_cluster: SlurmCluster, slurm_cluster_factory: SlurmClusterFactory
) -> None:
    c4 = slurm_cluster_factory(4)
    assert c4.gateway != slurm_cluster.gateway and c4.ctld_port != slurm_cluster.ctld_port
    assert sorted(c4.run(["srun", "-N4", "hostname"]).stdout.split()) == c4.nodes
    c4.close()
    assert c4.leftovers() == []
    assert sorted(slurm_cluster.run(["srun", "-N2", "hostname"]).stdout.split()) == ["sn1", "sn2"]
