"""Runs on a real Slurm cluster (tests/slurmcluster.py: slurmctld, one slurmd per namespace
host, no sshd): a user's project 2 nodes x 2 processes inside an allocation, stopped, its
allocation cancelled under it, and allocations ddptui asks for itself."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from jobs import leaders, marked_pids, run_id_of
from slurmcluster import SlurmCluster

from ddptui.store import rundir

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]

TRAIN = '''
import os, socket, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
print(f"rank {r} on {socket.gethostname()} job={os.environ.get('SLURM_JOB_ID')} "
      f"procid={os.environ.get('SLURM_PROCID')}", flush=True)
t = torch.ones(1)
if os.environ.get("TERM_TAKES"):  # a rank slow to end on SIGTERM (it saves something first)
    import signal
    def slow_end(*_):
        time.sleep(float(os.environ["TERM_TAKES"]))
        print(f"rank {r} saved its work", flush=True)
        sys.exit(143)
    signal.signal(signal.SIGTERM, slow_end)
for step in range(1, int(os.environ["STEPS"]) + 1):
    dist.all_reduce(t)
    print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    time.sleep(float(os.environ.get("DELAY", "0")))
dist.destroy_process_group()
'''
STEP_RE = re.compile(r"^\[(sn\d) r(\d)\] step (\d+) loss ", re.M)


def hosts(c: SlurmCluster, tmp: Path, slurm: dict[str, Any], steps: int, delay: float = 0,
          env: dict[str, Any] | None = None, grace: float = 3, **health: Any) -> Path:
    (tmp / "proj").mkdir(exist_ok=True)
    (tmp / "proj" / "train.py").write_text(TRAIN)
    d = {"defaults": {"python": sys.executable, "nproc_per_node": 2, "workdir": str(tmp / "w"),
                      "env": {"STEPS": steps, "DELAY": delay, "OMP_NUM_THREADS": 1,
                              **(env or {})}},
         "slurm": slurm, "job": {"script": "proj/train.py", "stop_grace": grace},
         **({"health": health} if health else {})}
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def ddptui(c: SlurmCluster, tmp: Path, *args: str, timeout: float = 180
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddptui.cli", "--state-dir", str(tmp / "state"),
                           *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **c.env})


def spawn(c: SlurmCluster, tmp: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    out = tmp / "out.txt"
    with open(out, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "ddptui.cli", "--state-dir",
                                 str(tmp / "state"), *args], stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, **c.env})
    return proc, out


def wait_for(path: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float = 120
             ) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace")
        if re.search(pattern, text, re.M):
            return text
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"no {pattern!r} in:\n{path.read_text(errors='replace')[-4000:]}")


def exit_code(proc: subprocess.Popen[bytes], out: Path, timeout: float) -> int:
    """ddptui's exit code; past ``timeout``, a failure with what ddptui was doing then (its
    threads' stacks), and ddptui killed so that nothing of it outlives the test."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        stacks = subprocess.run(["py-spy", "dump", "--pid", str(proc.pid)], capture_output=True,
                                text=True, timeout=60).stdout
        proc.kill()
        proc.wait(10)
        raise AssertionError(f"ddptui still runs after {timeout:g} s:\n{stacks}\n"
                             f"{out.read_text()[-3000:]}") from None


def nothing_left(c: SlurmCluster, job: str, run_id: str) -> None:
    """No process of the run left, and no step of ddptui's in the job, within 15 s (slurmd
    reports a step's end to slurmctld a moment after its processes are gone)."""
    def ours() -> list[str]:
        return [s for s in c.run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"],
                                 check=False).stdout.splitlines() if "ddptui" in s]

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (marked_pids(run_id) or ours()):
        time.sleep(0.2)
    assert marked_pids(run_id) == []
    assert ours() == []


def test_a_project_runs_in_an_allocation_every_step_once(slurm_cluster: SlurmCluster,
                                                        tmp_path: Path) -> None:
    c = slurm_cluster
    job = c.salloc(2)
    try:
        res = ddptui(c, tmp_path, "run", str(hosts(c, tmp_path, {"job": job}, 6)),
                     "--headless")
        out = res.stdout
        assert res.returncode == 0, out[-4000:] + res.stderr
        # every rank's every step once, each rank on the node Slurm placed it on
        assert Counter((n, int(r), int(s)) for n, r, s in STEP_RE.findall(out)) == Counter(
            (f"sn{1 + r // 2}", r, s) for r in range(4) for s in range(1, 7))
        for r in range(4):  # in the job, and not taken for a task of it (torchrun's ranks)
            assert f"rank {r} on sn{1 + r // 2} job={job} procid=None" in out
        meta = json.loads((tmp_path / "state" / "runs" / run_id_of(out) / "run.json")
                          .read_text())
        assert meta["config"]["slurm"]["job"] == job and not meta["config"]["slurm"]["owned"]
        assert [n["addr"] for n in meta["config"]["nodes"]] == [c.addresses["sn1"],
                                                                c.addresses["sn2"]]
        nothing_left(c, job, run_id_of(out))
        assert c.state(job) == "RUNNING"  # the allocation is the user's: left alone
    finally:
        c.scancel(job)


def test_a_warm_start_that_cannot_take_its_launch_is_given_up_for_launch_sh(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """The node's Python refuses to be a warm torchrun (it exits at once): each node's spec
    waits its time, is given up (emptied: it holds the ranks' environment), and launch.sh
    starts torchrun instead; the run trains every step once and leaves nothing."""
    c = slurm_cluster
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *--ddptui-warm*) exit 1;; esac\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    job = c.salloc(2)
    try:
        path = hosts(c, tmp_path, {"job": job}, 40, 0.1)
        path.write_text(path.read_text().replace(sys.executable, str(wrapper)))
        proc, out = spawn(c, tmp_path, "run", str(path), "--headless")
        text = wait_for(out, r"^\[sn2 r3\] step 3 ", proc)
        assert leaders(tmp_path, run_id_of(text)) == ["launch.sh", "launch.sh"]
        assert exit_code(proc, out, 120) == 0, out.read_text()[-3000:]
        text = out.read_text()
        assert Counter((n, int(r), int(s)) for n, r, s in STEP_RE.findall(text)) == Counter(
            (f"sn{1 + r // 2}", r, s) for r in range(4) for s in range(1, 41))
        voided = sorted((tmp_path / "w").rglob(rundir.WARM_SPEC + "*"))
        assert [p.name for p in voided] == [rundir.WARM_SPEC + ".void"] * 2
        assert all(p.read_bytes() == b"" for p in voided)
        nothing_left(c, job, run_id_of(text))
    finally:
        c.scancel(job)


def test_a_stop_mid_run_leaves_nothing_and_the_allocation_alive(slurm_cluster: SlurmCluster,
                                                               tmp_path: Path) -> None:
    stop_mid_run(slurm_cluster, tmp_path, [sys.executable, "-m", "ddptui.cli"])


#: ddptui, with the race forced: once ddptui has decided to stop sn2, and before its stop
#: program signals anything there, the run's step on sn2 ends by itself (its processes die,
#: as a torchrun whose rendezvous another node's stop closed does) and Slurm stops listing
#: it; "ended" is then written to argv[1].
LATE_SIGNAL = """
import os, signal, sys, time
from ddptui import cli
from ddptui.remote import stop
from ddptui.slurm import client

said, real = sys.argv.pop(1), stop.by_signals

def late(name, transport, target, grace, standby):
    if name == "sn2":
        want = ("DDPTUI_RUN=" + target.run_id + "/1").encode()
        for d in os.listdir("/proc"):
            try:
                env = open("/proc/" + d + "/environ", "rb").read().split(b"\\0")
            except (OSError, ValueError):
                continue
            if want in env:
                try:
                    os.kill(int(d), signal.SIGKILL)
                except OSError:
                    pass
        ours = [s.step_id for s in client.steps(transport.job)
                if s.name == "ddptui-" + target.run_id and s.nodes == "sn2"]
        # none listed: it had ended by itself already (sn1's stop closed the rendezvous)
        if not ours or client.wait_step_gone(ours[0], 30):
            with open(said, "w") as f:
                f.write("ended")
    return real(name, transport, target, grace, standby)

stop.by_signals = late
sys.exit(cli.main())
"""


def stop_mid_run(c: SlurmCluster, tmp: Path, argv: list[str], env: dict[str, Any] | None = None,
                 grace: float = 3) -> str:
    """A 2x2 run in a fresh allocation, Ctrl-C at step 3: stopped in the user's words, exit
    130, nothing left, the allocation alive; ddptui's output."""
    job = c.salloc(2)
    try:
        out = tmp / "out.txt"
        hosts_file = hosts(c, tmp, {"job": job}, 500, 0.2, env, grace)
        with open(out, "wb") as f:
            proc = subprocess.Popen([*argv, "--state-dir", str(tmp / "state"), "run",
                                     str(hosts_file), "--headless"], stdout=f,
                                    stderr=subprocess.STDOUT, env={**os.environ, **c.env})
        text = wait_for(out, r"^\[sn2 r3\] step 3 ", proc)
        assert leaders(tmp, run_id_of(text)) == ["warm", "warm"]  # started as ddptui started
        proc.send_signal(signal.SIGINT)  # how fast it stops: bench/stop.py, not a test
        assert exit_code(proc, out, 60) == 130, out.read_text()[-3000:]
        text = out.read_text()
        assert "lost" not in text and "could not stop" not in text, text[-3000:]
        assert "stopped" in text
        nothing_left(c, job, run_id_of(text))
        assert c.state(job) == "RUNNING"
        return text
    finally:
        c.scancel(job)


def test_a_step_that_ends_by_itself_before_its_signal_is_stopped_not_lost(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    said = tmp_path / "signal-came-late"
    text = stop_mid_run(slurm_cluster, tmp_path, [sys.executable, "-c", LATE_SIGNAL, str(said)])
    assert said.read_text() == "ended", text[-3000:]  # the race happened as forced


def test_ranks_slow_to_end_on_sigterm_are_stopped_not_lost(slurm_cluster: SlurmCluster,
                                                           tmp_path: Path) -> None:
    """Slurm 22.05 answers a delivered signal to a running step with "Invalid job id
    specified"; a step still there a moment later (ranks that save before they exit) must
    not make its node "lost".

    The grace is long (each rank saves for 1.5 s, but a rank inside a collective runs its
    SIGTERM handler only once the collective fails, after its peers' own saves): what is
    checked is that every save is let finish, not how fast."""
    text = stop_mid_run(slurm_cluster, tmp_path, [sys.executable, "-m", "ddptui.cli"],
                        {"TERM_TAKES": 1.5}, grace=30)
    assert text.count("[sn2] ── stopped") == 1
    for r in range(4):  # the grace is the ranks': Slurm's end of the step does not cut it
        assert f"] rank {r} saved its work" in text, text[-3000:]


def test_scancel_of_the_allocation_is_named_and_leaves_nothing(slurm_cluster: SlurmCluster,
                                                              tmp_path: Path) -> None:
    c = slurm_cluster
    job = c.salloc(2)
    proc, out = spawn(c, tmp_path, "run", str(hosts(c, tmp_path, {"job": job}, 500, 0.2)),
                      "--headless")
    text = wait_for(out, r"^\[sn1 r0\] step 3 ", proc)
    c.scancel(job)
    code = exit_code(proc, out, 90)
    text = out.read_text()
    assert code != 0, text[-3000:]
    assert f"ddptui: Slurm job {job} was cancelled (scancel, or an administrator)" in text, \
        text[-3000:]
    nothing_left(c, job, run_id_of(text))


def test_ddptui_asks_for_an_allocation_shows_it_queued_and_gives_it_back(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    c = slurm_cluster
    c.run(["scontrol", "update", f"PartitionName={c.partition}", "State=DOWN"])
    try:
        proc, out = spawn(c, tmp_path, "run", str(hosts(
            c, tmp_path, {"nodes": 2, "partition": c.partition, "time": "00:10:00"}, 4)),
            "--headless")
        queued = wait_for(out, r"is queued \(PENDING, reason PartitionDown", proc, 30)
        job = re.search(r"Slurm job (\d+) is queued", queued).group(1)  # type: ignore[union-attr]
    finally:
        c.run(["scontrol", "update", f"PartitionName={c.partition}", "State=UP"])
    assert exit_code(proc, out, 120) == 0, out.read_text()[-4000:]
    text = out.read_text()
    assert f"Slurm job {job} granted on sn[1-2]" in text
    assert len(STEP_RE.findall(text)) == 16
    assert c.squeue() == []  # given back
    meta = json.loads((tmp_path / "state" / "runs" / run_id_of(text) / "run.json").read_text())
    assert meta["config"]["slurm"]["owned"] is True
    assert meta["slurm"] == f"gave back Slurm job {job} (ddptui asked for it for this run)"


def test_a_request_slurm_refuses_is_exit_2_with_its_reason(slurm_cluster: SlurmCluster,
                                                          tmp_path: Path) -> None:
    c = slurm_cluster
    res = ddptui(c, tmp_path, "run", str(hosts(c, tmp_path, {"nodes": 2, "partition": "nope"},
                                                2)), "--headless", timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "ddptui: Slurm refused the allocation ddptui asked for (`salloc --no-shell " \
           "--job-name=ddptui --nodes=2 --partition=nope`, exit code 1); change the `slurm:` " \
           "section. Slurm said: " in res.stderr
    assert "invalid partition specified: nope" in res.stderr
    assert "Nothing was started." in res.stderr
    assert c.squeue() == [] and not (tmp_path / "w").exists()


def test_a_job_that_is_not_there_is_named(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    c = slurm_cluster
    path = hosts(c, tmp_path, {"job": "env"}, 2)
    res = ddptui(c, tmp_path, "run", str(path), "--headless", "--slurm-job", "999999")
    assert res.returncode == 2
    assert res.stderr.startswith("ddptui: Slurm has no job 999999: it never existed, or it "
                                 "ended long enough ago to be forgotten; `squeue --me` lists "
                                 "yours. Nothing was started."), res.stderr
    res = ddptui(c, tmp_path, "check", str(path))  # `env`, outside any allocation
    assert res.returncode == 2
    assert "SLURM_JOB_ID is not set here" in res.stderr


def test_attach_follows_a_slurm_run_after_its_controller_died(slurm_cluster: SlurmCluster,
                                                              tmp_path: Path) -> None:
    """ddptui killed mid-run: the run's own steps go on (their srun was let go), and attach
    reaches the nodes through new agent steps and follows the run to its end, every step of
    every rank once."""
    c = slurm_cluster
    job = c.salloc(2)
    try:
        proc, out = spawn(c, tmp_path, "run", str(hosts(c, tmp_path, {"job": job}, 25, 0.2)),
                          "--headless")
        run_id = run_id_of(wait_for(out, r"^\[sn2 r3\] step 3 ", proc))
        proc.kill()
        proc.wait(10)
        res = ddptui(c, tmp_path, "attach", run_id, "--headless", timeout=120)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr
        assert f"ddptui: run {run_id} finished, exit code 0" in res.stdout
        for r in range(4):
            logs = ddptui(c, tmp_path, "logs", run_id, "--rank", str(r)).stdout
            assert [int(s) for s in re.findall(r"step (\d+) loss", logs)] == list(range(1, 26))
        nothing_left(c, job, run_id)
        assert c.state(job) == "RUNNING"
    finally:
        c.scancel(job)


def test_check_and_clean_reach_the_allocation(slurm_cluster: SlurmCluster,
                                              tmp_path: Path) -> None:
    """`ddptui check` probes the allocation's nodes through srun; `clean` finds a run's files
    there; both refuse a file that would have them ask Slurm for nodes."""
    c = slurm_cluster
    job = c.salloc(2)
    try:
        path = hosts(c, tmp_path, {"job": "env"}, 2)
        res = ddptui(c, tmp_path, "check", str(path), "--slurm-job", job)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "sn1" in res.stdout and "sn2" in res.stdout
        assert ddptui(c, tmp_path, "run", str(path), "--headless", "--slurm-job",
                      job).returncode == 0
        res = ddptui(c, tmp_path, "clean", str(path), "--slurm-job", job, "--keep", "0")
        assert res.returncode == 0, res.stdout + res.stderr
        assert not list((tmp_path / "w" / ".ddptui" / "runs").iterdir())
        asks = hosts(c, tmp_path, {"nodes": 2}, 2)
        res = ddptui(c, tmp_path, "clean", str(asks))
        assert res.returncode == 2 and "works on an allocation you hold" in res.stderr
        assert c.squeue() == [{"id": job, "name": "no-shell", "state": "RUNNING",
                               "nodes": "sn[1-2]"}]
    finally:
        c.scancel(job)
