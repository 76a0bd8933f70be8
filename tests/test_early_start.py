"""Early start: every node's torchrun imports torch while the controller probes, checks and
syncs, runs the job only once released, enters a project made meanwhile, and leaves nothing
behind when its wait runs out or the launch is undone."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from jobs import marked_pids, write_job

from ddptui.config import load_config
from ddptui.launch import project
from ddptui.launch.plan import launch_script, make_plan
from ddptui.launch.ports import Abort
from ddptui.launch.staging import torchrun_program
from ddptui.live.session import Session
from ddptui.nodeprog import torchrun_tee
from ddptui.remote import nodeops
from ddptui.store import rundir


def held_file(tmp_path: Path) -> Path:
    hold = tmp_path / rundir.HOLD
    hold.touch()
    return hold


def test_a_hold_ends_when_the_controller_renames_its_file(tmp_path: Path) -> None:
    hold = held_file(tmp_path)
    subprocess.run(["sh", "-c", f"sleep 0.3; {nodeops.release_cmd(str(hold))}"], check=False,
                   timeout=30, start_new_session=True)
    t0 = time.monotonic()
    assert torchrun_tee.hold(str(hold), 30)
    assert time.monotonic() - t0 < 10
    assert (tmp_path / torchrun_tee.GO).exists() and not hold.exists()


def test_a_release_carries_the_chosen_route_to_torchrun(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What preflight chose for a node whose name fails is written with the release and
    applied before torchrun parses its flags: ``--local-addr`` first, the interfaces set."""
    from ddptui.diagnose.preflight.route import NameTrouble, RouteChoice
    from ddptui.launch.staging import route_text

    hold = held_file(tmp_path)
    chosen = RouteChoice("b", "eth0", "10.0.0.2", (NameTrouble("gloo", "b", "127.0.1.1", None),),
                         "10.0.0.2", {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "=eth0"})
    cmd = nodeops.release_cmd(str(hold), route_text(chosen))
    subprocess.run(["sh", "-c", cmd], check=True, timeout=30)
    assert torchrun_tee.hold(str(hold), 5)
    monkeypatch.setattr(sys, "argv", ["torchrun.py", "--nnodes", "2", "job.py", "--lr", "1"])
    for k in chosen.env:
        monkeypatch.delenv(k, raising=False)
    torchrun_tee.apply_route(str(tmp_path))
    assert sys.argv == ["torchrun.py", "--local-addr", "10.0.0.2", "--nnodes", "2", "job.py",
                        "--lr", "1"]
    assert {k: os.environ[k] for k in chosen.env} == dict(chosen.env)


def test_an_unreadable_route_stops_torchrun_with_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / torchrun_tee.ROUTE).write_text("{not json")
    with pytest.raises(SystemExit) as e:
        torchrun_tee.apply_route(str(tmp_path))
    assert e.value.code == torchrun_tee.EXIT_BAD_ROUTE
    assert "ddptui: torchrun not started:" in capsys.readouterr().err
    torchrun_tee.apply_route(str(tmp_path / "none"))  # no file: nothing chosen, nothing done


def test_a_hold_ends_at_once_when_the_launch_is_undone(tmp_path: Path) -> None:
    hold = held_file(tmp_path)
    threading.Timer(0.2, hold.unlink).start()
    t0 = time.monotonic()
    assert not torchrun_tee.hold(str(hold), 30)
    assert time.monotonic() - t0 < 10


def test_a_hold_that_runs_out_says_so_and_refuses_a_late_release(tmp_path: Path) -> None:
    hold = held_file(tmp_path)
    assert not torchrun_tee.hold(str(hold), 0.2)
    assert (tmp_path / torchrun_tee.EXPIRED).exists() and not hold.exists()
    late = subprocess.run(["sh", "-c", nodeops.release_cmd(str(hold))], capture_output=True,
                          timeout=30, check=False)
    assert late.returncode != 0  # the controller learns that it must start the node again
    assert not (tmp_path / torchrun_tee.GO).exists()


def test_a_release_that_wins_the_race_against_running_out_counts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller renames the file between the hold's last look and its own rename."""
    hold = held_file(tmp_path)
    real_rename = os.rename

    def controller_first(src: str, dst: str) -> None:
        real_rename(src, str(tmp_path / torchrun_tee.GO))  # the release lands first
        real_rename(src, dst)  # so the hold's own rename fails

    monkeypatch.setattr(torchrun_tee.os, "rename", controller_first)
    assert torchrun_tee.hold(str(hold), 0.0)


RANK = """\
import os
print("cwd", os.getcwd(), flush=True)
print("pwd", os.environ.get("PWD"), flush=True)
print("hold", [k for k in os.environ if k.startswith("DDPTUI_HOLD") or k == "DDPTUI_CWD"],
      flush=True)
"""


def test_a_held_torchrun_runs_only_once_released_and_enters_the_project_then(
        tmp_path: Path) -> None:
    """What launch.sh starts early, by the uploaded text: no rank runs while it holds; the
    project it is to run in is made only after it started (a first sync)."""
    ndir = tmp_path / "node0"
    ndir.mkdir()
    (ndir / rundir.TORCHRUN).write_bytes(torchrun_program())
    hold = held_file(ndir)
    project = tmp_path / "code"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DDPTUI_HOLD": str(hold),
           "DDPTUI_HOLD_S": "120", "DDPTUI_CWD": str(project)}
    logs = ndir / "torchelastic"
    with open(ndir / rundir.NODE_LOG, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, str(ndir / rundir.TORCHRUN), "--standalone", "--nproc-per-node",
             "1", "--tee", "3", "--log-dir", str(logs), str(project / "rank.py")],
            cwd=ndir, env=env, stdout=log, stderr=log)
    try:
        # A negative check (nothing to wait for): long enough for torchrun to have started its
        # rank, were it not held. Only a real bug fails it; a slow machine can only make it
        # pass more easily (torchrun not as far along).
        time.sleep(3)
        assert proc.poll() is None and not logs.exists(), (ndir / rundir.NODE_LOG).read_text()
        project.mkdir()
        (project / "rank.py").write_text(RANK)
        subprocess.run(["sh", "-c", nodeops.release_cmd(str(hold))], check=True, timeout=30)
        assert proc.wait(timeout=180) == 0, (ndir / rundir.NODE_LOG).read_text()
    finally:
        proc.kill()
    out = (ndir / rundir.NODE_LOG).read_text()
    assert f"cwd {project}" in out and f"pwd {project}" in out and "hold []" in out, out


def test_an_expired_hold_exits_with_its_own_code_and_starts_nothing(tmp_path: Path) -> None:
    ndir = tmp_path / "node0"
    ndir.mkdir()
    (ndir / rundir.TORCHRUN).write_bytes(torchrun_program())
    hold = held_file(ndir)
    env = {**os.environ, "DDPTUI_HOLD": str(hold), "DDPTUI_HOLD_S": "0"}
    done = subprocess.run(
        [sys.executable, str(ndir / rundir.TORCHRUN), "--standalone", "--nproc-per-node", "1",
         "--log-dir", str(ndir / "torchelastic"), str(ndir / "missing.py")],
        cwd=ndir, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == torchrun_tee.EXIT_NOT_RELEASED, done.stderr
    assert "torchrun not started: no release came from ddptui" in done.stderr
    assert not (ndir / "torchelastic").exists()


def local_job(tmp_path: Path, port: int, **job: object) -> Path:
    return write_job(tmp_path, {
        "defaults": {"python": sys.executable, "nproc_per_node": 1, "transport": "local",
                     "env": {"JOB_LINES": "3"}},
        "nodes": [{"name": "a", "workdir": str(tmp_path / "wa")},
                  {"name": "b", "workdir": str(tmp_path / "wb")}],
        "rendezvous": {"endpoint": "127.0.0.1", "port": port},
        "job": {"script": "job.py", **job},
    })


def test_plans_hold_unless_setup_commands_come_first(tmp_path: Path) -> None:
    cfg = load_config(local_job(tmp_path, 29741))
    workdirs = {"a": "/w/a", "b": "/w/b"}
    held = make_plan(cfg, "r1", workdirs=workdirs, rdzv_host="h", hold_s=5,
                     project_dirs={"a": "/w/a/code", "b": "/w/b/code"})
    for launch in held.nodes:
        assert launch.held and launch.hold_path == f"{launch.node_dir}/{rundir.HOLD}"
        assert f"export DDPTUI_HOLD='{launch.hold_path}'" in launch.script
        assert "export DDPTUI_CWD=" in launch.script and "if cd" not in launch.script
    plain = make_plan(cfg, "r1", workdirs=workdirs, rdzv_host="h",
                      project_dirs={"a": "/w/a/code", "b": "/w/b/code"})
    assert not any(n.held or "DDPTUI_HOLD" in n.script for n in plain.nodes)


@pytest.mark.torchrun
def test_a_node_whose_hold_ran_out_is_started_again(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch slower than the hold (a big first sync): that node starts once more, the run
    is whole, and the give-up is in its node log."""
    ctl = Session(load_config(local_job(tmp_path, 29742)), state_root=tmp_path / "state")
    ctl.hold_s = 0.0
    sync_all = project.sync_all

    def slow_sync(*args: object) -> None:
        assert ctl.plan is not None
        end = time.monotonic() + 120
        for launch in ctl.plan.nodes:  # until every node has given up holding
            while not Path(launch.node_dir, torchrun_tee.EXPIRED).exists():
                assert time.monotonic() < end, "no node gave up holding"
                time.sleep(0.05)
        sync_all(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(project, "sync_all", slow_sync)
    ctl.launch()
    result = ctl.wait(180)
    assert result is not None and result.exit_code == 0, result
    for name in ("a", "b"):
        log = Path(ctl.plan.for_node(name).node_dir, rundir.NODE_LOG).read_text()
        assert "torchrun not started: no release came from ddptui" in log
        assert "[seq 2] rank" in log, log
    assert marked_pids(ctl.run_id) == []


@pytest.mark.torchrun
def test_a_launch_undone_after_the_early_start_leaves_nothing(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """A failure after every node was started early (here the sync): no process, no node
    dir, and the error is the sync's."""
    ctl = Session(load_config(local_job(tmp_path, 29743)), state_root=tmp_path / "state")

    def failing_sync(*args: object) -> None:
        assert all(ctl.recorder.pgid(n) is not None for n in ("a", "b"))  # both started, held
        raise Abort(["node b: the sync failed (a test)"], cleanup=True)

    monkeypatch.setattr(project, "sync_all", failing_sync)
    with pytest.raises(Exception, match="the sync failed"):
        ctl.launch()
    assert marked_pids(ctl.run_id) == []
    assert list(tmp_path.glob("w*/.ddptui")) == []  # as a first launch found the nodes


@pytest.mark.parametrize("with_project", [False, True])
@pytest.mark.parametrize("hold_s", [None, 5.0])
def test_every_shape_of_launch_sh_runs_its_command_once(tmp_path: Path, with_project: bool,
                                                       hold_s: float | None) -> None:
    """Held or not, with a project or not: the command once, its exit code recorded."""
    ndir, code = tmp_path / "node0", tmp_path / "code"
    ndir.mkdir()
    code.mkdir()
    script = launch_script("r1", "a", 0, str(ndir), ("echo", "ran", "once"), {},
                           str(code) if with_project else None, hold_s)
    (ndir / rundir.LAUNCH_SCRIPT).write_text(script)
    res = subprocess.run(["sh", rundir.LAUNCH_SCRIPT], cwd=ndir, capture_output=True,
                         text=True, timeout=30, check=False)
    assert res.returncode == 0 and res.stdout == "ran once\n", (script, res.stderr)
    assert (ndir / rundir.EXIT_CODE).read_text() == "0\n"
    assert ("DDPTUI_HOLD=" in script) == (hold_s is not None)


def test_a_node_whose_hold_ran_out_is_told_as_never_released(tmp_path: Path) -> None:
    """Its controller died during the launch, so torchrun gave up holding (``expired``, no
    exit code) before a later ``ddptui attach`` followed it: not 'lost', but what happened."""
    import queue

    from ddptui.config import NodeConfig
    from ddptui.events import NodeState, NodeStatus
    from ddptui.live.follow import EventQueue, Finished, NodeFollower
    from ddptui.nodelog import NodeLogParser
    from ddptui.transport.local import LocalTransport

    ndir = tmp_path / "node0"
    ndir.mkdir()
    (ndir / rundir.NODE_LOG).write_bytes(b"")
    (ndir / torchrun_tee.EXPIRED).write_bytes(b"")
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait(10)
    out = EventQueue()
    transport = LocalTransport(NodeConfig(name="a", host="localhost"))
    f = NodeFollower(node="a", transport=transport, node_dir=str(ndir),
                     raw_path=tmp_path / "raw.log", parser=NodeLogParser("a"), out=out,
                     pgid=gone.pid, stopping=threading.Event(), reconnect=lambda: transport,
                     poll=0.05, python=sys.executable)
    f.start()
    f.join(30)
    assert not f.is_alive()
    items = []
    while True:
        try:
            items.append(out.get_nowait())
        except queue.Empty:
            break
    ends = [i for i in items if isinstance(i, Finished)]
    assert ends == [Finished("a", NodeStatus.FAILED, None)]
    said = [e.detail for i in items if not isinstance(i, Finished) for e in i.events
            if isinstance(e, NodeState)]
    assert any(d.startswith("never released") for d in said), said
    from ddptui.faces.headless import failure_report
    from ddptui.outcome import RunResult, run_exit_code
    from ddptui.store.store import Store

    store = Store()
    store.add_node("a", 0)
    for i in items:
        if not isinstance(i, Finished):
            store.apply(i.events)
    code = run_exit_code({"a": None}, [], ["a"], False)
    report = failure_report(store, RunResult(code, [], {"a": None}, False, None))
    assert "ddptui: node a: never released" in report and "lost" not in report


def test_a_node_end_survives_a_dropped_connection_while_it_is_judged(tmp_path: Path) -> None:
    """The connection drops on the read that asks whether a stop was requested: the follower
    reconnects and still reports the node's end, once."""
    import queue

    from ddptui.config import NodeConfig
    from ddptui.events import NodeStatus
    from ddptui.live.follow import EventQueue, Finished, NodeFollower
    from ddptui.nodelog import NodeLogParser
    from ddptui.transport.base import TransportError
    from ddptui.transport.local import LocalTransport

    class DropsOnce(LocalTransport):
        dropped = 0

        def read_from(self, path: str, offset: int, size: int) -> bytes:
            if path.endswith(rundir.STOP_REQUESTED) and not DropsOnce.dropped:
                DropsOnce.dropped += 1
                raise TransportError("a", "connection reset")
            return super().read_from(path, offset, size)

    ndir = tmp_path / "node0"
    ndir.mkdir()
    (ndir / rundir.NODE_LOG).write_bytes(b"")
    (ndir / rundir.EXIT_CODE).write_text("0\n")
    out = EventQueue()
    transport = DropsOnce(NodeConfig(name="a", host="localhost"))
    f = NodeFollower(node="a", transport=transport, node_dir=str(ndir),
                     raw_path=tmp_path / "raw.log", parser=NodeLogParser("a"), out=out,
                     pgid=None, stopping=threading.Event(), reconnect=lambda: transport,
                     poll=0.05)
    f.start()
    f.join(30)
    assert not f.is_alive() and DropsOnce.dropped == 1
    ends = []
    while True:
        try:
            item = out.get_nowait()
        except queue.Empty:
            break
        if isinstance(item, Finished):
            ends.append(item)
    assert ends == [Finished("a", NodeStatus.EXITED, 0)]
