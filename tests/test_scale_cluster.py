"""The scale cluster under a real run: eight namespace hosts, each with its own sshd.

One ``ddptui run --headless`` of a one-process script on eight nodes: every rank's line
arrives under its own node, and the run ends with exit code 0. It guards what the launch
benchmark (bench/launch.py) relies on at up to 16 hosts, at a size the CI can afford.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cluster import Cluster
from jobs import ddptui

from ddptui.config import NodeConfig, SSHOptions
from ddptui.transport.ssh.tailread import STREAM_READ_MIN
from ddptui.transport.ssh.transport import SSHTransport

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]
HOSTS = 8
SCRIPT = "import os\nprint(f\"hello from rank {os.environ['RANK']}\", flush=True)\n"
_ports = itertools.count(29900)


@pytest.fixture(scope="module")
def cluster8(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, float]]:
    """Eight hosts for this module, and how long they took to build."""
    if os.geteuid() != 0 and not os.environ.get("CI"):
        pytest.skip("cluster tests need root; they run as root and in CI")
    t0 = time.monotonic()
    c = Cluster.create(tmp_path_factory.mktemp("cluster8"), HOSTS)
    try:
        yield c, time.monotonic() - t0
    finally:
        c.close()


def test_cluster_of_eight_builds_fast_and_each_host_answers(
        cluster8: tuple[Cluster, float]) -> None:
    c, built = cluster8
    assert len(set(c.ips)) == HOSTS and c.names == [f"node{i}" for i in range(1, HOSTS + 1)]
    assert built < 20, f"an {HOSTS}-host cluster took {built:.1f} s to build"
    for h in c.hosts:
        assert len(h.sshd_procs) == 1 and h.sshd_procs[0].poll() is None


def test_big_reads_stream_the_same_bytes_as_sftp(cluster8: tuple[Cluster, float],
                                                  tmp_path: Path) -> None:
    c, _ = cluster8
    data = b"".join(b"line %d \xff\x00 end\n" % i for i in range(200_000))
    f = tmp_path / "node.log"
    f.write_bytes(data)
    node = NodeConfig(name="node1", host="node1")
    t = SSHTransport(node, SSHOptions(config_file=str(c.ssh_config),
                                      known_hosts=str(c.known_hosts)))
    t.connect(10)
    try:
        for offset, n in [(0, STREAM_READ_MIN - 1), (7, STREAM_READ_MIN), (12345, 3 << 20),
                          (len(data) - 100, 1 << 20), (len(data), 1 << 20)]:
            assert t.read_from(str(f), offset, n) == data[offset:offset + n], (offset, n)
    finally:
        t.close()


def test_headless_run_on_eight_hosts_every_rank_speaks(cluster8: tuple[Cluster, float],
                                                        tmp_path: Path) -> None:
    c, _ = cluster8
    project = tmp_path / "project"  # synced to the nodes: nothing in it may change meanwhile
    project.mkdir()
    (project / "job.py").write_text(SCRIPT)
    hosts = {
        "defaults": {"python": sys.executable, "nproc_per_node": 1},
        "nodes": [{"host": h.name, "workdir": str(tmp_path / f"work-{h.name}")}
                  for h in c.hosts],
        "rendezvous": {"backend": "c10d", "port": next(_ports)},
        "job": {"script": "job.py"},
        "ssh": {"config_file": str(c.ssh_config), "known_hosts": str(c.known_hosts),
                "connect_timeout": 10},
    }
    path = project / "hosts.yaml"
    path.write_text(yaml.safe_dump(hosts, sort_keys=False))
    res = ddptui("run", str(path), "--headless", state=tmp_path / "state", timeout=180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    for rank, h in enumerate(c.hosts):
        assert f"[{h.name} r{rank}] hello from rank {rank}" in res.stdout, res.stdout[-3000:]
