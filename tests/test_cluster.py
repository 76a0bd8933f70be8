"""The test cluster itself: if these fail, every integration test's verdict is suspect."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster import Cluster, ClusterFactory, reap_stale

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def test_hosts_have_distinct_hostnames_via_real_ssh(cluster2: Cluster) -> None:
    for h in cluster2.hosts:
        out = subprocess.run(
            cluster2.ssh_argv(h, "hostname"), capture_output=True, text=True, timeout=30
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == h.name


def test_hostname_resolves_to_own_namespace_address(cluster2: Cluster) -> None:
    # What torchrun does: the address of this machine's hostname must not be loopback.
    code = "import socket; print(socket.gethostbyname(socket.gethostname()))"
    for h in cluster2.hosts:
        via_exec = cluster2.exec(h, [sys.executable, "-c", code], check=True)
        assert via_exec.stdout.decode().strip() == h.ip
        via_ssh = subprocess.run(
            cluster2.ssh_argv(h, f"{sys.executable} -c '{code}'"),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert via_ssh.stdout.strip() == h.ip, via_ssh.stderr
        # ...and every other host's name resolves too (the rendezvous endpoint, say).
        for other in cluster2.hosts:
            got = cluster2.exec(h, ["getent", "hosts", other.name], check=True)
            assert got.stdout.decode().split()[0] == other.ip


def test_hosts_reach_each_other_and_nothing_else(cluster2: Cluster) -> None:
    a, b = cluster2.hosts
    connect = (
        "import socket,sys; s=socket.create_connection((sys.argv[1], 22), timeout=5);"
        " print(s.recv(64).decode().strip())"
    )
    got = cluster2.exec(a, [sys.executable, "-c", connect, b.ip], check=True)
    assert got.stdout.decode().startswith("SSH-2.0-OpenSSH")
    routes = cluster2.exec(a, ["ip", "-4", "route"], check=True).stdout.decode()
    assert "default" not in routes


def test_pids_and_stop_host(cluster_factory: ClusterFactory) -> None:
    c: Cluster = cluster_factory(1)
    (h,) = c.hosts
    assert h.sshd_procs[0].pid in c.pids(h)
    sleeper = subprocess.run(
        c.ssh_argv(h, "nohup sleep 300 >/dev/null 2>&1 & echo $!"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert int(sleeper.stdout.strip()) in c.pids(h)
    c.stop_host(h)
    assert c.pids(h) == []
    down = subprocess.run(
        ["ssh", "-o", "ConnectTimeout=1", *c.ssh_argv(h, "true")[1:]],
        capture_output=True,
        timeout=30,
    )
    assert down.returncode != 0


def test_teardown_leaves_nothing(tmp_path: Path, cluster_factory: ClusterFactory) -> None:
    # cluster_factory only for its environment check; this test owns the cluster's life.
    del cluster_factory
    c = Cluster.create(tmp_path / "c", 2)
    subprocess.run(c.ssh_argv("node1", "nohup sleep 300 >/dev/null 2>&1 &"), timeout=30)
    names = [h.netns for h in c.hosts]
    c.close()
    assert c.leftovers() == []
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for ns in names:
        assert ns not in listing
        assert not (Path("/etc/netns") / ns).exists()
    assert c.token not in links
    c.close()  # idempotent


def test_crashed_runs_leftovers_are_reaped(tmp_path: Path, cluster_factory: ClusterFactory) -> None:
    del cluster_factory  # environment check only
    script = (
        "import os, sys, pathlib\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from cluster import Cluster\n"
        "c = Cluster.create(pathlib.Path(sys.argv[1]), 1)\n"
        "print(c.token, c.hosts[0].netns, c.hosts[0].sshd_procs[0].pid, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"  # crash: no finalizer, no atexit
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "c"), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    token, netns, sshd_pid = out.stdout.split()
    assert netns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    removed = reap_stale()
    assert netns in removed
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert netns not in listing and token not in links
    assert not (Path("/etc/netns") / netns).exists()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{sshd_pid}/status").exists():
        status = Path(f"/proc/{sshd_pid}/status").read_text()
        if "State:\tZ" in status:
            break
        assert time.monotonic() < deadline, "the crashed run's sshd survived"
        time.sleep(0.05)
