"""Runs on a real Slurm cluster that binds tasks to CPUs (``task/affinity``): a run started
from inside an ``salloc`` shell that exported srun options and a launcher's variables gets
the node's CPUs and none of them, and one told it shares the job's one CPU."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from slurmcluster import SlurmCluster
from test_slurm_run import hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]

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
