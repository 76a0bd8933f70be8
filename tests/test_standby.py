"""Each node's stop program waits from the start of the run (``remote/standby.py``): a stop is
one line to it; one that is gone leaves the usual stop; none outlives its run or touches
anything when its channel closes. On the local transport and over real SSH."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster import Cluster
from jobs import marked_pids, write_job
from test_ssh_run import hosts, wait_until

from ddptui.config import NodeConfig, load_config
from ddptui.live.session import Session
from ddptui.remote import nodeops
from ddptui.remote import standby as standby_module
from ddptui.remote.standby import Standby
from ddptui.store import rundir
from ddptui.transport.local import LocalTransport


def standbys(run_id: str) -> list[int]:
    """The run's stop programs waiting on any node (all share this machine's PIDs)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            args = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(args) > 5 and args[4].startswith(f"DDPTUI_RUN={run_id}/".encode()) \
                and args[5] == b"-":
            found.append(int(d))
    return found


def marked_sleep(run_id: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"], start_new_session=True,
                            env={**os.environ, "DDPTUI_RUN": f"{run_id}/0"})


def local_standby(run_id: str, pgid: int, node_dir: Path) -> tuple[Standby, LocalTransport]:
    transport = LocalTransport(NodeConfig(name="a", host="localhost"))
    standby = Standby()
    standby.start("a", transport, nodeops.stop_cmd(sys.executable, run_id, 0, None, pgid,
                                                   str(node_dir)))
    return standby, transport


def test_one_line_stops_the_run_on_the_node(tmp_path: Path) -> None:
    job = marked_sleep("r-standby")
    try:
        standby, transport = local_standby("r-standby", job.pid, tmp_path)
        wait_until(lambda: standbys("r-standby"), 10, "the stop program to wait")
        # A negative check: a waiting stop program must stop nothing by itself. Only a real
        # bug fails it; a slow machine can only make it pass more easily.
        time.sleep(0.2)
        assert job.poll() is None and not (tmp_path / rundir.STOP_REQUESTED).exists()
        result = standby.stop("a", transport, 1.0)
        assert result is not None and job.pid in result.found and not result.leftover
        assert job.wait(5) == -signal.SIGTERM
        assert (tmp_path / rundir.STOP_REQUESTED).exists()
        wait_until(lambda: not standbys("r-standby"), 10, "the stop program to end")
        assert standby.stop("a", transport, 1.0) is None  # used once: then the usual way
    finally:
        job.kill()
        job.wait(5)


def test_closed_it_ends_and_touches_nothing(tmp_path: Path) -> None:
    job = marked_sleep("r-closed")
    try:
        standby, transport = local_standby("r-closed", job.pid, tmp_path)
        wait_until(lambda: standbys("r-closed"), 10, "the stop program to wait")
        standby.end()
        wait_until(lambda: not standbys("r-closed"), 10, "the stop program to end")
        assert job.poll() is None and not (tmp_path / rundir.STOP_REQUESTED).exists()
        assert standby.stop("a", transport, 1.0) is None
        standby.start("a", transport, "sleep 60")  # after the end: closed at once
        assert standby.stop("a", transport, 1.0) is None
    finally:
        job.kill()
        job.wait(5)


def test_one_on_another_connection_is_not_used(tmp_path: Path) -> None:
    """After a reconnect the node's transport is a new one: its old standby may be gone with
    the old connection, so the stop goes the usual way (and the old one is closed)."""
    job = marked_sleep("r-moved")
    try:
        standby, _ = local_standby("r-moved", job.pid, tmp_path)
        wait_until(lambda: standbys("r-moved"), 10, "the stop program to wait")
        assert standby.stop("a", LocalTransport(NodeConfig(name="a", host="localhost")),
                            1.0) is None
        wait_until(lambda: not standbys("r-moved"), 10, "the stop program to end")
        assert job.poll() is None
    finally:
        job.kill()
        job.wait(5)


def test_one_that_does_not_answer_is_given_up_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection that died without a word (a partition) swallows the line: the stop goes
    the usual way after HEARD_TIMEOUT_S, not after the grace and its slack."""
    monkeypatch.setattr(standby_module, "HEARD_TIMEOUT_S", 0.5)
    transport = LocalTransport(NodeConfig(name="a", host="localhost"))
    standby = Standby()
    standby.start("a", transport, "sleep 30")  # reads nothing, says nothing
    t0 = time.monotonic()
    assert standby.stop("a", transport, 10.0) is None
    assert time.monotonic() - t0 < 5



def test_each_waits_for_its_torchrun_to_speak_before_it_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Started at once, a stop program's interpreter would compete with torch's import on
    the node: each node's starts once its torchrun has spoken, or after a bounded wait."""
    monkeypatch.setattr(standby_module, "SPOKEN_WAIT_S", 3.0)
    started: list[str] = []
    spoken: set[str] = set()
    standby = Standby()
    monkeypatch.setattr(standby, "start", lambda name, _t, _c: started.append(name))
    on = LocalTransport(NodeConfig(name="a", host="localhost"))
    t0 = time.monotonic()
    standby.start_all(["a", "b"], lambda _n: on, lambda _n: "x", spoken.__contains__)
    time.sleep(0.5)
    assert started == []  # neither has spoken
    spoken.add("a")
    wait_until(lambda: started == ["a"], 5, "node a's standby")
    wait_until(lambda: started == ["a", "b"], 10, "node b's, after its wait")
    assert time.monotonic() - t0 >= 3.0
    ended = Standby()  # a run detached or ended while it waited: nothing starts, and its
    monkeypatch.setattr(ended, "start", lambda name, _t, _c: started.append(name))
    asked: list[str] = []  # connection is not asked for again (it would connect anew)
    ended.start_all(["c"], lambda n: asked.append(n), lambda _n: "x", lambda _n: False)  # type: ignore[func-returns-value]
    ended.end()
    time.sleep(0.5)
    assert started == ["a", "b"] and asked == []


@pytest.mark.cluster
@pytest.mark.torchrun
def test_over_ssh_a_stop_goes_by_them_and_none_outlives_the_run(cluster2: Cluster,
                                                               tmp_path: Path) -> None:
    """Both nodes' programs wait; one is killed first, so its node is stopped the usual way;
    the run stops clean either way and leaves no stop program behind."""
    d = hosts(cluster2, tmp_path, env={"JOB_LINES": "100000", "JOB_DELAY": "0.05"})
    job = tmp_path / "job"
    job.mkdir()
    ctl = Session(load_config(write_job(job, d)), state_root=tmp_path / "state")
    ctl.launch()
    try:
        wait_until(lambda: len(standbys(ctl.run_id)) == 2, 60, "a stop program on each node")
        said: list[object] = []
        real = ctl.standby.stop

        def stop(name: str, transport: object, grace: float) -> object:
            said.append(got := real(name, transport, grace))  # type: ignore[arg-type]
            return got

        ctl.standby.stop = stop  # type: ignore[method-assign]
        os.kill(standbys(ctl.run_id)[0], signal.SIGKILL)
        report = ctl.stop(grace=2)
    finally:
        if not ctl.done:
            ctl.stop(grace=0)
    assert report.clean, report
    assert sorted(s is None for s in said) == [False, True], said
    assert ctl.wait(30) is not None and not marked_pids(ctl.run_id)
    wait_until(lambda: not standbys(ctl.run_id), 10, "no stop program left")


@pytest.mark.cluster
@pytest.mark.torchrun
def test_over_ssh_a_run_that_ends_by_itself_leaves_none(cluster2: Cluster,
                                                       tmp_path: Path) -> None:
    d = hosts(cluster2, tmp_path, env={"JOB_LINES": "30", "JOB_DELAY": "0.1"})
    job = tmp_path / "job"
    job.mkdir()
    ctl = Session(load_config(write_job(job, d)), state_root=tmp_path / "state")
    ctl.launch()
    seen = 0
    deadline = time.monotonic() + 120
    while not ctl.done and time.monotonic() < deadline:
        seen = max(seen, len(standbys(ctl.run_id)))
        time.sleep(0.05)
    result = ctl.wait(30)
    assert result is not None and result.exit_code == 0
    assert seen == 2
    wait_until(lambda: not standbys(ctl.run_id), 10, "no stop program left")
