"""The rendezvous port's lock (``ddptui.launch.reserve``): the node program run here on a
folder of the test's own, and the words of a refusal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_plan import config

from ddptui.launch import reserve
from ddptui.launch.plan import make_plan
from ddptui.store import rundir

DEAD_PID = 2**22 + 17  # above pid_max's default: no such process


def take(folder: Path, run: str, ports: list[int], *, young_s: float = 600.0,
         key: str = "10.0.0.1", ndir: str = "/nonexistent") -> reserve.Reserved:
    args = {"dir": str(folder), "key": key, "ports": ports, "run": run, "young_s": young_s,
            "owner": rundir.LOCK_OWNER, "pid": rundir.LOCK_PID, "ndir": ndir,
            "exit": rundir.EXIT_CODE}
    done = subprocess.run([sys.executable, "-S", "-c", reserve.NODE_SRC, json.dumps(args)],
                          capture_output=True, text=True, timeout=30, check=True)
    return reserve.parse(done.stdout)


def started(lock: str | None, pid: int) -> None:
    assert lock is not None
    Path(lock, rundir.LOCK_PID).write_text(f"{pid}\n")


def test_the_first_run_takes_the_port_and_a_second_sees_it_held(tmp_path: Path) -> None:
    first = take(tmp_path, "run-a", [29400])
    assert first.port == 29400 and first.held == ()
    assert Path(first.lock or "", rundir.LOCK_OWNER).read_text() == "run-a\n/nonexistent\n"
    second = take(tmp_path, "run-b", [29400])
    assert second.port is None and second.held == ((29400, "run-a"),)


def test_a_port_left_to_ddptui_moves_on_to_the_next_free_one(tmp_path: Path) -> None:
    first = take(tmp_path, "run-a", reserve.candidates(29400, fixed=False))
    started(first.lock, os.getpid())
    second = take(tmp_path, "run-b", reserve.candidates(29400, fixed=False))
    assert (second.port, second.held) == (29401, ((29400, "run-a"),))
    assert reserve.candidates(29400, fixed=True) == [29400]
    assert reserve.candidates(65530, fixed=False)[-1] == 65535


def test_a_lock_whose_launch_sh_is_gone_is_taken_over(tmp_path: Path) -> None:
    first = take(tmp_path, "run-a", [29400])
    started(first.lock, DEAD_PID)
    again = take(tmp_path, "run-b", [29400])
    assert (again.port, again.held) == (29400, ())
    assert Path(again.lock or "", rundir.LOCK_OWNER).read_text().startswith("run-b\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["10.0.0.1-29400"]  # no leftovers


def test_a_run_that_ended_frees_its_port_though_its_launch_sh_lingers(tmp_path: Path) -> None:
    ndir = tmp_path / "node0"
    ndir.mkdir()
    first = take(tmp_path / "locks", "run-a", [29400], ndir=str(ndir))
    started(first.lock, os.getpid())  # alive, but the run wrote its exit code
    assert take(tmp_path / "locks", "run-b", [29400]).port is None
    (ndir / rundir.EXIT_CODE).write_text("0\n")
    assert take(tmp_path / "locks", "run-b", [29400]).port == 29400


def test_a_pid_reused_by_a_later_process_holds_nothing(tmp_path: Path) -> None:
    """The launch.sh that wrote the pid died without its lock; the pid now belongs to a
    process born after the file was written (pids come round fast at pid_max 32768)."""
    first = take(tmp_path, "run-a", [29400])
    started(first.lock, os.getpid())
    assert take(tmp_path, "run-b", [29400]).port is None  # this process: the writer, alive
    os.utime(Path(first.lock or "", rundir.LOCK_PID), (1e9, 1e9))  # written in 2001
    assert take(tmp_path, "run-b", [29400]).port == 29400


def test_a_launch_sh_ended_but_not_reaped_holds_nothing(tmp_path: Path) -> None:
    zombie = subprocess.Popen(["true"])  # not waited for: a zombie once it exits
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never ended"
            time.sleep(0.01)
        first = take(tmp_path, "run-a", [29400])
        started(first.lock, zombie.pid)
        assert take(tmp_path, "run-b", [29400]).port == 29400
    finally:
        zombie.wait(10)


def test_a_lock_not_yet_started_is_live_while_young_only(tmp_path: Path) -> None:
    first = take(tmp_path, "run-a", [29400])
    assert take(tmp_path, "run-b", [29400], young_s=600).port is None
    os.utime(first.lock or "", (0, 0))  # made long ago, its launch never started
    assert take(tmp_path, "run-b", [29400], young_s=600).port == 29400


def test_locks_are_per_address(tmp_path: Path) -> None:
    assert take(tmp_path, "run-a", [29400], key="10.0.0.1").port == 29400
    assert take(tmp_path, "run-b", [29400], key="10.0.0.2").port == 29400
    assert reserve.lock_key("fe80::1%eth0") == "fe80__1_eth0"


def test_release_removes_only_this_runs_lock(tmp_path: Path) -> None:
    got = take(tmp_path, "run-a", [29400])
    lock = got.lock or ""
    subprocess.run(["sh", "-c", reserve.release_cmd(lock, "run-b")], check=True, timeout=10)
    assert Path(lock).is_dir()
    started(lock, os.getpid())
    subprocess.run(["sh", "-c", reserve.release_cmd(lock, "run-a")], check=True, timeout=10)
    assert not Path(lock).exists()


def test_refusals_name_the_run_the_port_and_what_to_do() -> None:
    held = reserve.Reserved(None, None, ((29400, "run-a"),))
    fixed = reserve.refusal("node1", "10.0.0.1", True, held)
    assert fixed.startswith("node node1: the rendezvous port 29400 on 10.0.0.1 is held by run "
                            "run-a, which is still running there")
    assert "Stop it (`ddptui stop run-a`), or set `rendezvous.port`" in fixed
    many = reserve.Reserved(None, None, ((29400, "run-a"), (29401, "run-b")))
    auto = reserve.refusal("node1", "10.0.0.1", False, many)
    assert "(29400, 29401) is held by runs run-a, run-b; stop one of them" in auto
    with pytest.raises(ValueError, match="unreadable answer"):
        reserve.parse("Traceback (most recent call last):\n")


def test_the_plan_tells_the_stores_node_it_hosts_and_keeps_the_lock_live() -> None:
    cfg = config()
    names = [n.name for n in cfg.ordered_nodes]
    plan = make_plan(cfg, "r1", workdirs={n: "/w" for n in names}, rdzv_host="10.0.0.1",
                     store_node=names[0], locks={names[0]: "/tmp/ddptui-rdzv/10.0.0.1-29400"})
    confs = [n.argv[n.argv.index("--rdzv-conf") + 1] for n in plan.nodes]
    assert confs[0].endswith(",is_host=true") and confs[1].endswith(",is_host=false")
    assert "echo $$ > '/tmp/ddptui-rdzv/10.0.0.1-29400/pid'" in plan.nodes[0].script
    assert "ddptui-rdzv" not in plan.nodes[1].script
    bare = make_plan(cfg, "r1", workdirs={n: "/w" for n in names}, rdzv_host="10.0.0.1")
    assert all("is_host" not in " ".join(n.argv) for n in bare.nodes)


def test_runs_that_race_for_one_port_each_name_the_one_that_won(tmp_path: Path) -> None:
    """A lock appears with its owner in it: a run that loses by a hair names the winner,
    never "another ddptui run" (what a lock made empty, its owner written after, gave)."""
    args = {"dir": str(tmp_path), "key": "10.0.0.1", "ports": [29400], "young_s": 600.0,
            "owner": rundir.LOCK_OWNER, "pid": rundir.LOCK_PID, "ndir": "/nonexistent",
            "exit": rundir.EXIT_CODE}
    for round_ in range(5):
        procs = [subprocess.Popen([sys.executable, "-S", "-c", reserve.NODE_SRC,
                                   json.dumps({**args, "key": f"k{round_}", "run": f"run-{i}"})],
                                  stdout=subprocess.PIPE, text=True) for i in range(6)]
        got = [reserve.parse(p.communicate(timeout=30)[0]) for p in procs]
        winners = [f"run-{i}" for i, g in enumerate(got) if g.port == 29400]
        assert len(winners) == 1, got
        assert all(g.held == ((29400, winners[0]),) for g in got if g.port is None), got
    assert [p.name for p in tmp_path.iterdir() if ".new." in p.name or ".stale." in p.name] == []
