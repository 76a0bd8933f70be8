"""Runs on a real Slurm cluster that binds tasks to CPUs (``task/affinity``): a run started
from inside an ``salloc`` shell that exported srun options and a launcher's variables gets
the node's CPUs and none of them; a run's telemetry comes from its Slurm nodes, and a stop
is checked on each node, by ddptui and by the test."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jobs import run_id_of
from slurmcluster import SlurmCluster
from test_slurm_run import exit_code, hosts, wait_for

from ddptui.store import rundir
from ddptui.store.samples import read_telemetry

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]

STANDIN = Path(__file__).parent / "data" / "telemetry"
#: Each rank's affinity and environment, as one line.
SHOW_ENV = '''
import json, os
import torch.distributed as dist
dist.init_process_group("gloo")
print("ENV " + json.dumps({"rank": dist.get_rank(), "affinity": sorted(os.sched_getaffinity(0)),
                           "env": dict(os.environ)}), flush=True)
dist.barrier()
dist.destroy_process_group()
'''
#: What the user exported in the salloc shell before starting ddptui: srun options
#: (SRUN_CPUS_PER_TASK is what Slurm 22.05's srun reads for SLURM_CPUS_PER_TASK; the
#: memory pair makes srun refuse every step: "SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and
#: SLURM_MEM_PER_NODE are mutually exclusive"), and a launcher's variables.
LAUNCHER = {"MASTER_PORT": "29123", "RANK": "7"}
EXPORTS = {
    "cpus": {"SLURM_CPUS_PER_TASK": "1", "SRUN_CPUS_PER_TASK": "1", "SLURM_MEM_PER_CPU": "100",
             **LAUNCHER},
    "memory": {"SLURM_MEM_PER_CPU": "100", "SLURM_MEM_PER_NODE": "100", **LAUNCHER},
}


def cpu_ids(text: str) -> set[int]:
    """``0-1,4`` -> {0, 1, 4}."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


@pytest.mark.parametrize("exported", sorted(EXPORTS))
def test_a_run_from_an_salloc_shell_gets_the_nodes_cpus_and_nothing_inherited(
        bound_slurm_cluster: SlurmCluster, tmp_path: Path, exported: str) -> None:
    c = bound_slurm_cluster
    path = hosts(c, tmp_path, {"job": "env"}, 1)
    (tmp_path / "proj" / "train.py").write_text(SHOW_ENV)
    job_file = tmp_path / "job.txt"
    # ddptui in the allocation's own shell (salloc runs the command with the job's
    # environment: SLURM_JOB_ID, SLURM_NTASKS=4, ...), after the user's exports
    shell = (f"scontrol show job -d $SLURM_JOB_ID > {job_file} && exec env "
             + " ".join(f"{k}={v}" for k, v in EXPORTS[exported].items())
             + f" {sys.executable} -m ddptui.cli --state-dir {tmp_path / 'state'} run {path} "
               "--headless")
    res = c.run(["salloc", "-N", "2", "--ntasks-per-node=2", "sh", "-c", shell], timeout=180,
                check=False)
    out = res.stdout
    assert res.returncode == 0, out[-4000:] + res.stderr[-2000:]
    job = re.search(r"JobId=(\d+)", job_file.read_text()).group(1)  # type: ignore[union-attr]
    held = {n: cpu_ids(ids) for n, ids in re.findall(r"Nodes=(sn\d) CPU_IDs=(\S+)",
                                                     job_file.read_text())}
    held |= {n: cpu_ids(ids) for ids in re.findall(r"Nodes=sn\[1-2\] CPU_IDs=(\S+)",
                                                   job_file.read_text()) for n in ("sn1", "sn2")}
    assert set(held) == {"sn1", "sn2"} and all(len(v) == 2 for v in held.values()), held
    seen = {}
    for node, line in re.findall(r"^\[(sn\d) r\d\] ENV (.*)$", out, re.M):
        d = json.loads(line)
        seen[d["rank"]] = (node, set(d["affinity"]), d["env"])
    assert sorted(seen) == [0, 1, 2, 3], out[-4000:]
    ports = set()
    for rank, (node, affinity, env) in seen.items():
        assert held[node] <= affinity, (rank, node, affinity, held)  # every CPU held there
        assert env["RANK"] == str(rank)  # torchrun's, not the shell's 7
        assert env["MASTER_PORT"] != LAUNCHER["MASTER_PORT"]
        ports.add(env["MASTER_PORT"])
        slurm = {k for k in env if k.startswith("SLURM_")}
        assert not slurm & {"SLURM_CPUS_PER_TASK", "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_NODE",
                            "SLURM_NTASKS", "SLURM_PROCID", "SLURM_CPU_BIND"}, sorted(slurm)
        assert "SRUN_CPUS_PER_TASK" not in env
        assert env["SLURM_JOB_ID"] == job  # the job is still said
    assert len(ports) == 1  # one rendezvous, torchrun's own


def test_two_ranks_on_the_one_cpu_the_job_holds_are_said_at_launch(
        bound_slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """The issue's allocation: `salloc -N 2` holds one CPU per node here (CR_CPU), and the
    nodes' 2 ranks share it; the run goes on, told why it will be slow and what to ask for."""
    c = bound_slurm_cluster
    path = hosts(c, tmp_path, {"job": "env"}, 1)
    shell = f"exec {sys.executable} -m ddptui.cli --state-dir {tmp_path / 'state'} run {path} " \
            "--headless"
    res = c.run(["salloc", "-N", "2", "sh", "-c", shell], timeout=180, check=False)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    for node in ("sn1", "sn2"):
        said = re.search(rf"^\[{node} ddptui\] preflight: node {node}: its 2 ranks share the one "
                         r"CPU Slurm job \d+ holds there, so their DataLoader workers will "
                         r"starve; ask Slurm for 2 or more CPUs per node \(`salloc "
                         r"--ntasks-per-node=2`, `-c 2` or `--exclusive`\)\.$",
                         res.stdout, re.M)
        assert said, res.stdout[-4000:]


def marked_in(c: SlurmCluster, node: str, run_id: str) -> list[int]:
    """The processes in the node's namespace that carry the run's marker."""
    want = f"DDPTUI_RUN={run_id}/".encode()
    found = []
    for pid in c.node_pids(node):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(want) for e in env):
            found.append(pid)
    return found


def test_telemetry_from_both_nodes_and_a_stop_checked_on_each(
        bound_slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    c = bound_slurm_cluster
    job = c.salloc(2)
    stale = Path(f"/tmp/torchelastic_test{os.getpid()}")
    # a stand-in nvidia-smi on the nodes' PATH (tests/data/telemetry), for GPU samples
    path = f"{STANDIN}:{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    try:
        out = tmp_path / "out.txt"
        with open(out, "wb") as f:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ddptui.cli", "--state-dir", str(tmp_path / "state"),
                 "run", str(hosts(c, tmp_path, {"job": job}, 500, 0.2, {"PATH": path})),
                 "--headless"],
                stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **c.env})
        text = wait_for(out, r"^\[sn2 r3\] step 3 ", proc)
        run_id = run_id_of(text)
        run_dir = tmp_path / "state" / "runs" / run_id
        deadline = time.monotonic() + 30
        samples = []
        while time.monotonic() < deadline:
            samples = [s for s in read_telemetry(run_dir) if s.cpu is not None
                       and s.mem_total and s.net_rate is not None and s.gpus]
            if {s.node for s in samples} == {"sn1", "sn2"}:
                break
            time.sleep(0.5)
        assert {s.node for s in samples} == {"sn1", "sn2"}, (run_dir / rundir.TELEMETRY)
        # what a torchrun given no --log-dir leaves in the node's temp dir, named by the run
        (stale / f"{run_id}_x1" / "attempt_0").mkdir(parents=True)
        proc.send_signal(signal.SIGINT)
        assert exit_code(proc, out, 60) == 130, out.read_text()[-3000:]
        text = out.read_text()
        for node in ("sn1", "sn2"):
            said = re.search(rf"^ddptui: node {node} checked after the stop: (.*)$", text, re.M)
            assert said, text[-3000:]
            assert "no process of the run is left" in said.group(1)
            assert f"Slurm lists no step of the run on {node} (squeue -s)" in said.group(1)
            assert "torchelastic temp dir" in said.group(1)
        assert f"removed 1 torchelastic temp dir(s) of the run left in {stale}" in text
        # checked here too, independently: Slurm's list, each node's processes, /tmp
        assert [s for s in c.run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"]
                                 ).stdout.splitlines() if "ddptui" in s] == []
        assert {n: marked_in(c, n, run_id) for n in c.nodes} == {"sn1": [], "sn2": []}
        assert not list(Path("/tmp").glob(f"torchelastic_*/{run_id}_*"))
        assert c.state(job) == "RUNNING"
    finally:
        c.scancel(job)
        subprocess.run(["rm", "-rf", str(stale)], check=False)
