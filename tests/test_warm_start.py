"""A warm torchrun (``ddptui.launch.warm``): started before its node dir exists, it imports
torch at once, takes its spec as soon as it is written (its process group said while the
import still runs), holds, then runs torchrun as launch.sh would: in the node dir, its output
in node.log from the first byte, the ranks' environment and project, the exit code written.
Given up, it exits without a trace; and a spec nobody takes is given up and emptied."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jobs import marked_pids

from ddptui import nodeprog
from ddptui.config import HostsConfig, load_config
from ddptui.launch import staging, warm
from ddptui.launch.plan import make_plan
from ddptui.nodeprog import torchrun_tee, warm_start
from ddptui.remote import nodeops
from ddptui.store import rundir
from ddptui.transport.local import LocalTransport

RANK = """\
import os, sys
print("cwd", os.getcwd(), flush=True)
print("secret", os.environ.get("WARM_SECRET"), flush=True)
print("path0", os.environ.get("PYTHONPATH", "").split(":")[0], flush=True)
sys.exit(int(os.environ.get("RANK_EXIT", "0")))
"""


def start_warm(ndir: Path) -> subprocess.Popen[bytes]:
    """As ``warm.start`` starts it in its step: ``python -c`` with the spec's path only."""
    return subprocess.Popen(
        [sys.executable, "-c", nodeprog.source(torchrun_tee), warm_start.WARM,
         str(ndir / rundir.WARM_SPEC)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, env={**os.environ, "LOGLEVEL": "INFO"})  # the job's env


def spec(ndir: Path, project: Path, rank_exit: int) -> dict[str, object]:
    return {"argv": ["--standalone", "--nproc-per-node", "1", "--tee", "3", "--log-dir",
                     str(ndir / "torchelastic"), str(project / "rank.py")],
            "env": {"WARM_SECRET": "s3cret", "RANK_EXIT": str(rank_exit),
                    "PYTHONUNBUFFERED": "1"},
            "project": str(project), "hold": str(ndir / rundir.HOLD), "hold_s": 120,
            "pgid": str(ndir / rundir.PGID), "lock_pid": str(ndir / "lock" / rundir.LOCK_PID),
            "log": str(ndir / rundir.NODE_LOG), "exit_code": str(ndir / rundir.EXIT_CODE)}


def wait_for(path: Path, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.01)
    raise AssertionError(f"{path} not written within {seconds} s")


@pytest.mark.torchrun
@pytest.mark.parametrize("rank_exit", [0, 3])
def test_a_warm_torchrun_takes_its_spec_at_once_and_runs_as_launch_sh_would(
        tmp_path: Path, rank_exit: int) -> None:
    ndir = tmp_path / "w" / "node0"
    project = tmp_path / "code"
    proc = start_warm(ndir)  # before the node dir exists, as on a real launch
    try:
        ndir.mkdir(parents=True)
        (ndir / "lock").mkdir()
        (ndir / rundir.HOLD).touch()
        project.mkdir()
        (project / "rank.py").write_text(RANK)
        (ndir / rundir.WARM_SPEC).write_text(json.dumps(spec(ndir, project, rank_exit)))
        t0 = time.monotonic()
        pgid = int(wait_for(ndir / rundir.PGID, 60))
        took = time.monotonic() - t0
        assert pgid == os.getpgid(proc.pid) == proc.pid  # a group of its own, as launch.sh
        assert int(wait_for(ndir / "lock" / rundir.LOCK_PID, 5)) == proc.pid  # torchrun's
        assert not (ndir / rundir.WARM_SPEC).exists()
        # taken while torch was still being imported: no rank yet, nothing released
        assert proc.poll() is None and not (ndir / "torchelastic").exists(), took
        subprocess.run(["sh", "-c", nodeops.release_cmd(str(ndir / rundir.HOLD))], check=True,
                       timeout=30)
        code = proc.wait(timeout=180)
    finally:
        proc.kill()
    log = (ndir / rundir.NODE_LOG).read_text()
    expected = 1 if rank_exit else 0  # torchrun's own exit for a failed rank
    assert code == expected and (ndir / rundir.EXIT_CODE).read_text() == f"{expected}\n", log
    assert f"cwd {project}" in log and "secret s3cret" in log and f"path0 {project}" in log
    assert "Starting elastic_operator" in log, log  # torchrun's own stderr, in the log too
    assert not list(ndir.glob(rundir.WARM_SPEC + "*")), list(ndir.iterdir())  # no secret left


def test_a_warm_torchrun_given_up_exits_without_writing_anything(tmp_path: Path) -> None:
    ndir = tmp_path / "node0"
    proc = start_warm(ndir)
    try:
        ndir.mkdir()
        (ndir / (rundir.WARM_SPEC + warm_start.VOID)).touch()  # what take_warm leaves
        assert proc.wait(timeout=180) == torchrun_tee.EXIT_NOT_RELEASED
    finally:
        proc.kill()
    assert sorted(p.name for p in ndir.iterdir()) == [rundir.WARM_SPEC + warm_start.VOID]


def test_a_spec_nobody_takes_is_given_up_emptied_and_launch_sh_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No warm torchrun takes it (it died, or its step never started): after
    ``WARM_TAKE_S`` the spec is renamed away from a late taker and emptied (it holds the
    secret env), and the node is left for launch.sh."""
    monkeypatch.setattr(staging, "WARM_TAKE_S", 0.3)
    cfg = load_config_text(tmp_path)
    plan = make_plan(cfg, "r1", workdirs={"a": str(tmp_path / "w")}, rdzv_host="127.0.0.1",
                     hold_s=30)
    node = plan.nodes[0]
    Path(node.node_dir).mkdir(parents=True)
    spec_path = warm.spec_path(node.node_dir)
    Path(spec_path).write_bytes(staging.warm_spec(node, 30))
    transport = LocalTransport(cfg.nodes[0])
    assert staging.take_warm(transport, node, spec_path) is None
    assert not Path(spec_path).exists()
    assert Path(spec_path + warm_start.VOID).read_bytes() == b""


def test_a_spec_taken_late_is_waited_for_not_started_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Taken just as ddptui gives up: the rename is the one winner, and the pgid it then
    writes is the node's."""
    monkeypatch.setattr(staging, "WARM_TAKE_S", 0.3)
    cfg = load_config_text(tmp_path)
    plan = make_plan(cfg, "r1", workdirs={"a": str(tmp_path / "w")}, rdzv_host="127.0.0.1",
                     hold_s=30)
    node = plan.nodes[0]
    ndir = Path(node.node_dir)
    ndir.mkdir(parents=True)
    spec_path = warm.spec_path(node.node_dir)
    Path(spec_path + warm_start.TAKEN).write_bytes(b"{}")  # taken, its pgid not yet said
    late = subprocess.Popen(["sh", "-c", f"sleep 0.8; echo 4242 > {ndir / rundir.PGID}"])
    try:
        assert staging.take_warm(LocalTransport(cfg.nodes[0]), node, spec_path) == 4242
    finally:
        late.wait(timeout=30)


def test_warm_start_wants_no_setup_and_a_workdir_the_node_can_expand(tmp_path: Path) -> None:
    """At once for this machine and for a step of a job known now; an SSH node's once it is
    reached (``warm.over``); never before setup commands, nor with a workdir ``~other``."""
    local = load_config_text(tmp_path)
    path = tmp_path / "s.yaml"
    path.write_text("slurm: {job: '12'}\njob: {script: j.py}\n")
    slurm = load_config(path).slurm
    srun = dataclasses.replace(local.nodes[0], transport="srun", host="sn1")
    ssh = dataclasses.replace(local.nodes[0], transport="ssh", host="h1")
    for workdir, setup, wanted in [("/w", (), True), ("~/w", (), True), ("~", (), True),
                                   ("~other/w", (), False), ("w", (), False),
                                   ("/w", ("true",), False)]:
        for node, at_once in [(srun, True), (ssh, False), (local.nodes[0], True)]:
            node = dataclasses.replace(node, workdir=workdir)
            cfg = dataclasses.replace(local, slurm=slurm, nodes=(node,),
                                      job=dataclasses.replace(local.job, setup=setup))
            assert warm.wanted(cfg, node) is wanted, (workdir, setup)
            assert warm.at_once(cfg, node) is (wanted and at_once), (node.transport, workdir)
    no_job = dataclasses.replace(local, nodes=(srun,))
    assert not warm.at_once(no_job, srun)


def load_config_text(tmp_path: Path) -> HostsConfig:
    path = tmp_path / "hosts.yaml"
    (tmp_path / "j.py").touch()
    path.write_text(f"defaults: {{transport: local, python: {sys.executable}}}\n"
                    f"nodes: [{{name: a, workdir: {tmp_path / 'w'}}}]\njob: {{script: j.py}}\n")
    return load_config(path)


def test_a_warm_torchrun_here_starts_at_once_and_a_launch_undone_stops_it(
        tmp_path: Path) -> None:
    """On this machine it starts with ddptui (in a session of its own, the run's marker in
    its environment); an interpreter that is not there starts nothing to wait for; and the
    launch undone before it took its spec stops it by the marker."""
    cfg = load_config_text(tmp_path)
    missing = dataclasses.replace(cfg, nodes=(dataclasses.replace(
        cfg.nodes[0], python=str(tmp_path / "no-python")),))
    assert warm.start(missing, "wr0") == frozenset()
    assert warm.start(cfg, "wr1") == {"a"}
    try:
        deadline = time.monotonic() + 30
        while not marked_pids("wr1") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marked_pids("wr1"), "no process of the warm start carries the run's marker"
    finally:
        warm.cancel(cfg, "wr1", {"a"}, lambda name: LocalTransport(cfg.node(name)))
    deadline = time.monotonic() + 30
    while marked_pids("wr1") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marked_pids("wr1") == []


def test_a_warm_torchrun_whose_import_died_leaves_its_code_and_no_copy_of_the_spec(
        tmp_path: Path) -> None:
    """The importing half killed (an OOM, a stop that caught it alone) before it read the
    spec: the other half still says the exit as launch.sh would (128 + the signal) and
    removes the taken spec, which holds the secret env."""
    ndir = tmp_path / "node0"
    proc = start_warm(ndir)
    try:
        deadline = time.monotonic() + 30
        children: list[str] = []
        while not children and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            time.sleep(0.01)
        assert children, "the warm torchrun did not split"
        os.kill(int(children[0]), signal.SIGKILL)
        ndir.mkdir()
        (ndir / rundir.HOLD).touch()
        project = tmp_path / "code"
        (ndir / rundir.WARM_SPEC).write_text(json.dumps(spec(ndir, project, 0)))
        assert proc.wait(timeout=60) == 128 + signal.SIGKILL
    finally:
        proc.kill()
    assert (ndir / rundir.EXIT_CODE).read_text() == f"{128 + signal.SIGKILL}\n"
    assert not list(ndir.glob(rundir.WARM_SPEC + "*")), list(ndir.iterdir())
