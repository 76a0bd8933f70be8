"""What every step ddptui starts on Slurm inherits (pure, and the run step's shell line run
by a real sh), preflight's CPU and visible-GPU checks on constructed and real answers, and a
stop's checks carried to its report."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_preflight_report import run_program
from test_preflight_rules import config, healthy, verdict

from ddptui.config import HostsConfig, NodeConfig
from ddptui.diagnose.preflight import Mark, parse_report
from ddptui.diagnose.preflight.report import Gpu, GpuInfo, TorchInfo
from ddptui.remote.nodeops import StopResult
from ddptui.remote.stop import stop_all
from ddptui.transport.srun import stepenv
from ddptui.transport.srun.transport import SrunTransport

#: An salloc shell's environment after the user's exports, beside a login's own.
SALLOC_SHELL = {
    "PATH": "/usr/bin:/bin", "HOME": "/home/u", "SLURM_CONF": "/etc/slurm/slurm.conf",
    "SLURM_JOB_ID": "42", "SLURM_JOBID": "42", "SLURM_NTASKS": "4", "SLURM_NPROCS": "4",
    "SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_CPUS_PER_TASK": "1",
    "SRUN_CPUS_PER_TASK": "1", "SLURM_MEM_PER_CPU": "100", "SLURM_MEM_PER_NODE": "4000",
    "SLURM_CPU_BIND": "cores", "SLURM_GPUS_PER_TASK": "1", "SLURM_EXPORT_ENV": "NONE",
    "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29123", "RANK": "7", "LOCAL_RANK": "1",
    "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "3",
    "TORCHELASTIC_RUN_ID": "old", "TORCHELASTIC_RESTART_COUNT": "2",
    "CUDA_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "INFO", "MY_SECRET": "s3cret",
}


def test_srun_inherits_no_option_no_launcher_variable_and_no_gpu_narrowing() -> None:
    kept = stepenv.scrubbed(SALLOC_SHELL)
    # only what the client needs to find its cluster, and what is not Slurm's or a
    # launcher's; SLURM_JOB_ID too goes: srun is told the job by --jobid, and sets it in the
    # step itself
    assert kept == {"PATH": "/usr/bin:/bin", "HOME": "/home/u",
                    "SLURM_CONF": "/etc/slurm/slurm.conf", "NCCL_DEBUG": "INFO",
                    "MY_SECRET": "s3cret"}
    assert stepenv.dropped(kept) == [] and stepenv.unset_argv(kept) == []


def test_the_variables_go_by_name_only() -> None:
    argv = stepenv.unset_argv(SALLOC_SHELL)
    assert argv[0] == "env" and argv[1:] == [a for k in stepenv.dropped(SALLOC_SHELL)
                                             for a in ("-u", k)]
    assert "SLURM_MEM_PER_CPU" in argv and "MY_SECRET" not in argv
    assert not any("s3cret" in a or "29123" in a for a in argv)
    # env -u, then srun: what srun sees is what the scrub keeps
    out = subprocess.run([*argv, sys.executable, "-c", "import os, json; "
                          "print(json.dumps(dict(os.environ)))"], env=SALLOC_SHELL,
                         capture_output=True, text=True, check=True).stdout
    assert {k: v for k, v in json.loads(out).items() if k != "LC_CTYPE"} == \
        stepenv.scrubbed(SALLOC_SHELL)


def test_both_steps_get_every_cpu_of_the_node_and_a_scrubbed_srun(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in SALLOC_SHELL.items():
        monkeypatch.setenv(k, v)
    t = SrunTransport(NodeConfig("sn1", "sn1", transport="srun"), "42")
    argv = t.srun("python3", "-c", "pass")
    at = argv.index("srun")
    assert argv[:at] == stepenv.unset_argv(os.environ)
    assert "SLURM_MEM_PER_CPU" in argv[:at] and "MASTER_PORT" in argv[:at]
    assert {"--whole", "--cpu-bind=none", "--jobid=42", "--nodelist=sn1", "--ntasks=1"} <= \
        set(argv[at:])


def test_the_ranks_keep_the_jobs_and_the_nodes_variables_not_the_steps() -> None:
    """What slurmstepd sets in the run's step (one task with the node's CPUs), through the
    line the step's sh runs before launch.sh."""
    step = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "42", "SLURM_JOBID": "42",
            "SLURM_JOB_NODELIST": "sn[1-2]", "SLURM_CPUS_ON_NODE": "2",
            "SLURM_JOB_CPUS_PER_NODE": "2(x2)", "SLURM_CONF": "/c", "SLURMD_NODENAME": "sn1",
            "SLURM_STEP_ID": "3", "SLURM_STEPID": "3", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
            "SLURM_CPUS_PER_TASK": "2", "SLURM_CPU_BIND": "quiet,none",
            "SLURM_CPU_BIND_TYPE": "none", "SLURM_LOCALID": "0", "SLURM_TASK_PID": "99",
            "SLURM_STEP_NODELIST": "sn1", "SLURM_ARRAY_TASK_ID": "5", "OTHER": "x=SLURM_Y=1"}
    line = stepenv.ranks_unset() + "env"
    out = subprocess.run(["sh", "-c", line], env=step, capture_output=True, text=True,
                         check=True).stdout
    seen = dict(ln.split("=", 1) for ln in out.splitlines() if "=" in ln)
    assert {k for k in seen if k.startswith(("SLURM", "OTHER"))} == {
        "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_CPUS_ON_NODE",
        "SLURM_JOB_CPUS_PER_NODE", "SLURM_CONF", "SLURMD_NODENAME", "SLURM_ARRAY_TASK_ID",
        "OTHER"}


def slurm_config() -> HostsConfig:
    return config("a", transport="srun", nproc_per_node=2)


def test_cpus_pass_when_the_ranks_have_what_the_job_holds() -> None:
    r = healthy("a", affinity=(0, 1, 2, 3), slurm_job="42", slurm_cpus=4)
    got = verdict([r], slurm_config()).get("a", "cpus")
    assert got is not None
    assert (got.mark, got.detail, got.problem) == (Mark.PASS, "4 CPUs", None)


def test_cpus_fail_when_something_narrows_them_below_what_the_job_holds() -> None:
    r = healthy("a", affinity=(3,), slurm_job="42", slurm_cpus=4)
    v = verdict([r], slurm_config())
    got = v.get("a", "cpus")
    assert got is not None and got.mark is Mark.FAIL and got.detail == "1 of 4"
    assert got.problem is not None and got.problem.startswith(
        "node a: its 2 ranks may run on 1 of the 4 CPUs Slurm job 42 holds there (CPU 3), so "
        "they share them and their DataLoader workers starve.")
    assert "(`--cpus-per-task`, `--exclusive`)" in got.problem


def test_one_cpu_for_two_ranks_is_said_when_that_is_all_the_job_holds() -> None:
    r = healthy("a", affinity=(0,), slurm_job="42", slurm_cpus=1)
    v = verdict([r], slurm_config())
    assert v.ok and [c.check for c in v.cautions] == ["cpus"]
    assert v.cautions[0].problem == (
        "node a: its 2 ranks share the one CPU Slurm job 42 holds there, so their DataLoader "
        "workers will starve; ask Slurm for 2 or more CPUs per node (`salloc "
        "--ntasks-per-node=2`, `-c 2` or `--exclusive`).")


def test_cpus_are_not_judged_off_slurm_or_unanswered() -> None:
    v = verdict([healthy("a", affinity=(0,), slurm_cpus=None)], config("a", nproc_per_node=2))
    assert v.get("a", "cpus").mark is Mark.SKIP  # type: ignore[union-attr]
    v = verdict([healthy("a")], slurm_config())
    assert v.get("a", "cpus").detail == "not checked"  # type: ignore[union-attr]


def gpus(n: int) -> GpuInfo:
    return GpuInfo(tuple(Gpu(i, "NVIDIA H100", f"GPU-{i}", 0.0, 80000.0) for i in range(n)))


@pytest.mark.parametrize("visible", ["0", ""])
def test_gpus_narrowed_below_nproc_per_node_fail(visible: str) -> None:
    r = healthy("a", gpu=gpus(2), login_env={"CUDA_VISIBLE_DEVICES": visible},
                torch=TorchInfo("2.13.0", "12.8", "2.27", True, 2))
    got = verdict([r], slurm_config()).get("a", "gpus")
    shown = len(visible.split(",")) if visible else 0
    assert got is not None and got.mark is Mark.FAIL and got.detail == f"{shown} visible < 2"
    assert got.problem == (
        f"node a: CUDA_VISIBLE_DEVICES={visible or '(empty)'} shows its ranks {shown} of its "
        f"2 GPUs but nproc_per_node is 2: rank {shown} would fail with 'invalid device "
        "ordinal'. Leave CUDA_VISIBLE_DEVICES out of `env:` (ddptui gives torchrun every GPU "
        f"of the node), or set nproc_per_node to {shown}.")
    ok = dataclasses.replace(r, login_env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert verdict([ok], slurm_config()).get("a", "gpus").mark is Mark.PASS  # type: ignore


def test_the_node_program_tells_its_affinity(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "8")
    p = run_program(tmp_path)
    r = parse_report("a", p.stdout)
    assert r.affinity == tuple(sorted(os.sched_getaffinity(0)))
    assert (r.slurm_job, r.slurm_cpus) == ("42", 8)


def test_what_each_node_checked_after_a_stop_reaches_the_report() -> None:
    def stop_one(name: str) -> StopResult:
        if name == "b":
            raise RuntimeError("node b: unreachable")
        return StopResult([1, 2], [], [], ["no process of the run is left",
                                           "Slurm lists no step of the run on a (squeue -s)"])

    report = stop_all(["a", "b"], stop_one)
    assert report.checked == {"a": ["no process of the run is left",
                                    "Slurm lists no step of the run on a (squeue -s)"]}
    assert report.leftover == {"a": []} and report.errors == {"b": "node b: unreachable"}
