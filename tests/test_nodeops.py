"""The node commands run for real through sh, here, against processes of our own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ddptui.ingest import split_complete
from ddptui.remote import nodeops


def sh(cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=timeout)


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)


def ignores_term(p: subprocess.Popen[bytes]) -> bool:
    """Whether the process has set SIGTERM to be ignored yet (its SigIgn mask in /proc)."""
    with open(f"/proc/{p.pid}/status") as f:
        mask = next(ln.split()[1] for ln in f if ln.startswith("SigIgn:"))
    return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)


def test_probe_reports_python_and_torch() -> None:
    res = sh(nodeops.probe_cmd(sys.executable))
    probe = nodeops.parse_probe(res.stdout)
    assert res.returncode == 0 and probe is not None
    assert probe.torch and probe.torch.startswith("2.")


def test_probe_reads_torch_without_importing_it(tmp_path: Path) -> None:
    """The launch probe finds torch by its files: a torch whose import would fail (or take
    seconds) still reports its version, and one that is absent or names none is an error."""
    import torch

    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise SystemExit("imported")\n')
    (fake / "version.py").write_text("from typing import Optional\n__version__ = '2.99.0+cu128'"
                                     "\ncuda: Optional[str] = '12.8'\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={fake.parent} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    probe = nodeops.parse_probe(sh(nodeops.probe_cmd(str(wrapper))).stdout)
    assert probe is not None and probe.torch == "2.99.0+cu128" and probe.cuda_version == "12.8"
    assert probe.cuda is None  # only an import can tell; ddptui check asks
    (fake / "version.py").unlink()
    probe = nodeops.parse_probe(sh(nodeops.probe_cmd(str(wrapper))).stdout)
    assert probe is not None and probe.torch is None and "names no __version__" in (
        probe.torch_error or "")
    real = nodeops.parse_probe(sh(nodeops.probe_cmd(sys.executable)).stdout)
    assert real is not None and real.torch == torch.__version__
    assert real.cuda_version == torch.version.cuda
    empty = tmp_path / "python-without-torch"
    empty.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    empty.chmod(0o755)
    probe = nodeops.parse_probe(sh(nodeops.probe_cmd(str(empty))).stdout)
    assert probe is not None and probe.torch is None
    assert probe.torch_error == "ModuleNotFoundError: No module named 'torch'"


def test_probe_of_a_missing_interpreter_exits_127() -> None:
    res = sh(nodeops.probe_cmd("/no/such/python; touch /tmp/ddptui-pwned"))
    assert res.returncode == 127 and "no such interpreter" in res.stderr
    assert not os.path.exists("/tmp/ddptui-pwned")


def test_stop_kills_marked_processes_in_other_sessions_too(tmp_path: Path) -> None:
    env = dict(os.environ, DDPTUI_RUN="r1/0", LOCAL_RANK="0")  # ranks, as torchrun starts them
    ignore_term = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "time.sleep(60)")
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env,
                              start_new_session=True),
             subprocess.Popen([sys.executable, "-c", ignore_term], env=env,
                              start_new_session=True)]
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=dict(os.environ, DDPTUI_RUN="r1/1"), start_new_session=True)
    try:
        wait_for(lambda: ignores_term(procs[1]), "the second rank to ignore SIGTERM")
        res = sh(nodeops.stop_cmd(sys.executable, "r1", 0, 1.0, None, str(tmp_path)), timeout=30)
        out = nodeops.parse_stop(res.stdout)
        assert out is not None and out.leftover == []
        assert sorted(out.found) == sorted(p.pid for p in procs)
        assert procs[1].pid in out.killed and procs[0].pid not in out.killed
        for p in procs:
            assert p.wait(timeout=5) is not None
        assert other.poll() is None  # another node's processes are not ours to stop
        assert (tmp_path / "stop_requested").exists()
    finally:
        for p in [*procs, other]:
            p.kill()
            p.wait(timeout=5)


def test_stop_does_not_wait_out_the_grace_for_an_agent_whose_ranks_are_gone(
        tmp_path: Path) -> None:
    """torchrun's agent may linger on its peers' rendezvous after its ranks exit: once no rank
    is left it goes after a second, not after the grace, and is not reported as a rank that
    ignored SIGTERM."""
    ignore_term = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "time.sleep(60)")
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env=dict(os.environ, DDPTUI_RUN="r2/0", LOCAL_RANK="0"),
                            start_new_session=True)
    agent = subprocess.Popen([sys.executable, "-c", ignore_term],
                             env=dict(os.environ, DDPTUI_RUN="r2/0"), start_new_session=True)
    try:
        wait_for(lambda: ignores_term(agent), "the agent to ignore SIGTERM")
        # a grace of 600 s that the stop must not wait out: sh() gives up after 60
        res = sh(nodeops.stop_cmd(sys.executable, "r2", 0, 600.0, None, str(tmp_path)))
        out = nodeops.parse_stop(res.stdout)
        assert out is not None and out.leftover == [] and out.killed == []
        assert sorted(out.found) == sorted([rank.pid, agent.pid])
        assert agent.wait(timeout=5) == -9 and rank.wait(timeout=5) == -15
    finally:
        for p in (rank, agent):
            p.kill()
            p.wait(timeout=5)


def test_quoting_of_paths(tmp_path: Path) -> None:
    weird = "/tmp/ddptui test/$(touch x); 'q'"
    res = sh(f"printf %s {nodeops.remove_cmd(weird).split('-- ', 1)[1]}")
    assert res.stdout == weird
    made = tmp_path / "ddptui test" / "$(touch x); 'q'"
    assert sh(f"cd {tmp_path} && " + nodeops.mkdir_cmd(str(made))).returncode == 0
    assert not (tmp_path / "x").exists()
    for d in (made, made.parent):  # the run's secrets live in there: the user's alone
        assert d.is_dir() and d.stat().st_mode & 0o777 == 0o700


def test_an_undone_launch_removes_a_workdir_it_made_and_only_that(tmp_path: Path) -> None:
    """Refused first launch: the node is left as it was found, a workdir the user made (with
    its own mode, maybe a mount point) stays, and one holding anything else stays too."""
    from ddptui.store import rundir

    for existed, other in ((False, False), (True, False), (False, True)):
        work = tmp_path / f"work {existed} {other} $(touch x)"
        if existed:
            work.mkdir()
        ndir = rundir.node_dir(str(work), "r1", 0)
        made = sh(nodeops.launch_mkdir_cmd(ndir, f"{ndir}/torchelastic"))
        assert made.returncode == 0 and (nodeops.NEW_WORKDIR in made.stdout) != existed
        if other:
            (work / "theirs").write_text("kept")
        res = sh(nodeops.remove_run_cmd(ndir, nodeops.NEW_WORKDIR in made.stdout))
        assert res.returncode == 0, res.stderr
        assert work.exists() == (existed or other)
        assert not (work / ".ddptui").exists()
    assert not (tmp_path / "x").exists()


def test_split_complete() -> None:
    assert split_complete(b"a\nb\nc") == (b"a\nb\n", b"c")
    assert split_complete(b"abc") == (b"", b"abc")
    assert split_complete(b"a\n") == (b"a\n", b"")


def test_alive_reports_a_live_group_and_a_dead_one() -> None:
    p = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert sh(nodeops.alive_cmd(p.pid)).returncode == 0
    finally:
        p.kill()
        p.wait(timeout=5)
    assert sh(nodeops.alive_cmd(p.pid)).returncode != 0
