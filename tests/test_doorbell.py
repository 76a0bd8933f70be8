"""The follower's doorbell (``live/doorbell.py``): the node program rings when the log
grows, and ends when its channel closes; on the local transport and over real SSH."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from cluster import Cluster

from ddptui.config import NodeConfig, SSHOptions
from ddptui.live.doorbell import Doorbell
from ddptui.transport.local import LocalTransport
from ddptui.transport.ssh import SSHTransport


def local_bell(log: Path, content: bytes, python: str = sys.executable) -> Doorbell:
    """A doorbell on a local node for ``log``, which holds ``content``."""
    log.write_bytes(content)
    return Doorbell(LocalTransport(NodeConfig(name="a", host="localhost")), python, str(log))


def test_it_rings_on_growth_and_only_then(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    bell = local_bell(log, b"old\n")
    try:
        assert bell.ringing
        assert not bell.wait(4, 0.3)  # read up to its end already: nothing to say
        with open(log, "ab") as f:
            f.write(b"new\n")
        assert bell.wait(4, 5)
        assert not bell.wait(8, 0.2)  # read up to the new end: silent again
    finally:
        bell.close()


def test_a_log_already_ahead_of_the_follower_rings_at_once(tmp_path: Path) -> None:
    bell = local_bell(tmp_path / "node.log", b"unread\n")
    try:
        assert bell.wait(0, 5)
    finally:
        bell.close()


def test_closing_it_ends_the_program(tmp_path: Path) -> None:
    bell = local_bell(tmp_path / "node.log", b"")
    spawned = bell._spawned
    assert spawned is not None
    bell.close()
    assert spawned.proc.poll() is not None  # type: ignore[attr-defined]
    assert not bell.ringing and not bell.wait(0, 0.01)


def test_a_doorbell_that_cannot_run_leaves_the_poll(tmp_path: Path) -> None:
    bell = local_bell(tmp_path / "node.log", b"", "/opt/no-such-env/bin/python3")
    start = time.monotonic()
    assert not bell.wait(0, 5)  # it ends at once: found dead, the wait ends with it
    assert not bell.ringing and time.monotonic() - start < 4
    assert not bell.wait(0, 5) and time.monotonic() - start < 4  # later waits: at once


@pytest.mark.cluster
def test_over_ssh_it_rings_and_leaves_nothing_behind(cluster2: Cluster, tmp_path: Path) -> None:
    host = cluster2.hosts[0]
    log = tmp_path / "ssh-node.log"  # the hosts share this machine's file system
    log.write_bytes(b"")
    t = SSHTransport(NodeConfig(name=host.name, host=host.name),
                     SSHOptions(config_file=str(cluster2.ssh_config),
                                known_hosts=str(cluster2.known_hosts), connect_timeout=10))
    t.connect(10)
    try:
        before = set(cluster2.pids(host))
        bell = Doorbell(t, sys.executable, str(log))
        assert bell.ringing and not bell.wait(0, 0.3)
        with open(log, "ab") as f:
            f.write(b"a line\n")
        assert bell.wait(0, 5)
        assert set(cluster2.pids(host)) - before  # its sh and python run on the node
        bell.close()
        end = time.monotonic() + 10
        while set(cluster2.pids(host)) - before and time.monotonic() < end:
            time.sleep(0.05)
        assert not set(cluster2.pids(host)) - before, "the doorbell outlived its channel"
    finally:
        t.close()


PAUSED = """import time
print("first", flush=True)
time.sleep(1.0)
print(f"second {time.time()}", flush=True)
time.sleep(0.5)
"""


@pytest.mark.torchrun
def test_a_follower_with_a_long_poll_reads_a_line_when_its_doorbell_rings(
        tmp_path: Path) -> None:
    """With a 5 s poll, the second line (a second after the first) would wait about four
    seconds for the follower's next look; the doorbell has it read at once."""
    from jobs import write_job

    from ddptui.config import load_config
    from ddptui.events import LineRun, LogLine
    from ddptui.live.follow import Batch
    from ddptui.live.session import Session

    path = write_job(tmp_path, {
        "defaults": {"python": sys.executable, "nproc_per_node": 1, "transport": "local"},
        "nodes": [{"name": "a", "workdir": str(tmp_path / "wa")}],
        "rendezvous": {"endpoint": "127.0.0.1", "port": 29745},
        "job": {"script": "job.py"},
    })
    (tmp_path / "job.py").write_text(PAUSED)
    ctl = Session(load_config(path), state_root=tmp_path / "state", poll=5.0)
    late: list[float] = []

    def listen(batch: Batch) -> None:
        now = time.time()
        for ev in batch.events:
            for line in ev.lines() if type(ev) is LineRun else [ev]:
                if type(line) is LogLine and line.text.startswith("second "):
                    late.append(now - float(line.text.split()[1]))

    ctl.add_listener(listen)
    ctl.launch()
    try:
        end = time.monotonic() + 60
        while not late and time.monotonic() < end:
            time.sleep(0.05)
        assert late and late[0] < 2.0, late
    finally:
        ctl.stop(grace=1)
        ctl.wait(30)
