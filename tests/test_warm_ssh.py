"""A warm torchrun on SSH nodes (``ddptui.launch.warm``), on real sshd hosts: sent through
the OpenSSH client as ddptui starts, before ddptui's own connection, its ranks' secret
environment on ssh's stdin, never on its command line; and where ``ssh`` cannot do it (here:
a client that refuses every host), sent over ddptui's connection instead. Either way each
node's process group is led by the warm torchrun and the run is whole."""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

import pytest
from cluster import Cluster
from jobs import ddptui, leaders, run_id_of, seqs, spawn_ddptui, write_job
from test_ssh_run import hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]

SECRET = "warm-ssh-s3cret-value"


def ssh_on_path(tmp: Path, works: bool) -> dict[str, str]:
    """An ``ssh`` first on PATH that writes down each argv and its stdin's size, then runs
    the real client (``works``) or refuses as a client that cannot reach the host does."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    real = shutil.which("ssh")
    assert real is not None
    then = f'exec {real} "$@"' if works else "exit 255"
    wrapper = bin_dir / "ssh"
    wrapper.write_text("#!/bin/sh\n"
                       f"printf '%s\\n<<end>>\\n' \"$*\" >> {tmp / 'ssh-argv.log'}\n"
                       f"{then}\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def calls(log: str) -> list[str]:
    return [c.strip() for c in log.split("<<end>>") if c.strip()]


def run_and_look(c: Cluster, tmp: Path, works: bool) -> tuple[str, list[str], str]:
    d = hosts(c, tmp, env={"JOB_LINES": "100000", "JOB_DELAY": "0.05", "HF_TOKEN": SECRET})
    path = write_job(tmp, d)
    state, out = tmp / "state", tmp / "out.txt"
    proc = spawn_ddptui("run", str(path), "--headless", state=state, out=out,
                        env=ssh_on_path(tmp, works))
    try:
        end = time.monotonic() + 180
        while "[node2 r3] [seq 3]" not in out.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < end, out.read_text()[-3000:]
            time.sleep(0.2)
        run_id = run_id_of(out.read_text())
        led = leaders(tmp, run_id)
    finally:
        stopped = ddptui("stop", run_id_of(out.read_text()), state=state, timeout=60)
        proc.wait(60)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert seqs(state / "runs" / run_id / "ranks" / "rank3.log")[:4] == [0, 1, 2, 3]
    return run_id, led, (tmp / "ssh-argv.log").read_text()


def test_an_ssh_nodes_warm_torchrun_is_sent_through_openssh_as_ddptui_starts(
        cluster2: Cluster, tmp_path: Path) -> None:
    run_id, led, argv = run_and_look(cluster2, tmp_path, works=True)
    assert led == ["warm", "warm"]
    sent = calls(argv)
    assert len(sent) == 2 and all("--ddptui-warm" in a and "BatchMode=yes" in a
                                  and "StrictHostKeyChecking=yes" in a for a in sent), sent
    assert {a.split(" -- ")[1].split()[0] for a in sent} == {"node1", "node2"}
    assert SECRET not in argv and run_id in argv  # the secret went on stdin


def test_where_openssh_cannot_the_warm_torchrun_goes_over_ddptuis_connection(
        cluster2: Cluster, tmp_path: Path) -> None:
    _run_id, led, argv = run_and_look(cluster2, tmp_path, works=False)
    assert len(calls(argv)) == 2  # it was asked, and refused
    assert led == ["warm", "warm"]
