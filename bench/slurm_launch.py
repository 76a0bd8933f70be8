"""Launch time on Slurm: from the command to the first line of every rank, through ddptui
against the ``srun torchrun`` line a user types, at 1, 2 and 4 nodes.

One command: ``python bench/slurm_launch.py`` (as root: it builds a real Slurm cluster of 4
nodes in network namespaces, see ``tests/slurmcluster.py``). Inside one allocation of the
size measured, for each size and in rotating order, the same script (2 processes per node,
c10d rendezvous on the first node, one line per rank) is started

* by ``ddptui run HOSTS --headless`` with ``slurm: {job: J}`` (the job read from Slurm, one
  agent step per node, probe and preflight, upload, the run's own step, following);
* by the line users put in their sbatch scripts, typed by hand::

      srun --overlap --jobid J -N n --ntasks-per-node 1 python -m torch.distributed.run \\
          --nnodes n --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint ADDR:PORT ...

  whose output comes back through srun.

Each figure is the median of ``--rounds``. Target: ddptui <= 1.2x the srun line at every size.
On a machine with fewer cores than ranks, both sides queue for the same cores. Beside each
size, ddptui's own CPU time (user + system, of its process and the ``srun`` clients it
waits for; not the nodes') divided by the nodes: what ddptui costs the machine it runs on.
ddptui runs from its bytecode, as an installed copy does (``scale_setup.with_bytecode``).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_setup import (  # noqa: E402
    ddptui_argv,
    finish,
    median,
    next_port,
    wait_for_lines,
    with_bytecode,
)
from slurmcluster import SlurmCluster  # noqa: E402

SCRIPT = "import os\nprint(f\"hello from rank {os.environ['RANK']}\", flush=True)\n"
NPROC = 2
TIMEOUT_S = 240.0
TARGET = 1.2


def _wanted(world: int) -> set[str]:
    return {f"hello from rank {r}" for r in range(world)}


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def by_ddptui(c: SlurmCluster, job: str, n: int, work: Path, script: Path,
              cpu: list[float]) -> float:
    """The time to every rank's line; ``cpu`` gets ddptui's CPU time for the whole run."""
    hosts = work / f"hosts-{n}.yaml"
    hosts.write_text(
        f"defaults: {{python: {sys.executable}, nproc_per_node: {NPROC}, "
        f"workdir: {work / 'w'}}}\nslurm: {{job: {job}}}\n"
        f"rendezvous: {{port: {next_port()}}}\njob: {{script: {script}}}\n")
    env = {**os.environ, **c.env}
    used = _children_cpu()  # this process waits for no other child meanwhile
    t0 = time.perf_counter()
    proc = subprocess.Popen(ddptui_argv(work / "state", "run", str(hosts), "--headless"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    took = wait_for_lines(proc, _wanted(n * NPROC), TIMEOUT_S) - t0
    if finish(proc) != 0:
        raise RuntimeError("ddptui's run failed")
    cpu.append(_children_cpu() - used)
    return took


def by_srun(c: SlurmCluster, job: str, n: int, script: Path) -> float:
    argv = ["srun", "--overlap", f"--jobid={job}", "-N", str(n), "--ntasks-per-node=1",
            "--unbuffered", sys.executable, "-m", "torch.distributed.run", "--nnodes", str(n),
            "--nproc-per-node", str(NPROC), "--rdzv-backend", "c10d", "--rdzv-endpoint",
            f"{c.addresses['sn1']}:{next_port()}", "--rdzv-id", f"b{time.monotonic_ns()}",
            str(script)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, **c.env})
    took = wait_for_lines(proc, _wanted(n * NPROC), TIMEOUT_S) - t0
    if finish(proc) != 0:
        raise RuntimeError("the srun line failed")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,2,4", help="node counts (default 1,2,4)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="ddptui-bench-slurm-"))
    with_bytecode(work)
    (work / "project").mkdir()
    script = work / "project" / "hello.py"  # the project ddptui ships: this file alone
    script.write_text(SCRIPT)
    met = True
    with SlurmCluster(work / "cluster", max(sizes)) as c:
        print(f"{'nodes':>5} {'ranks':>5} {'srun torchrun':>14} {'ddptui':>8} {'ratio':>6} "
              f"{'ddptui CPU/node':>16}")
        for n in sizes:
            job = c.salloc(n)
            times: dict[str, list[float]] = {"srun": [], "ddptui": []}
            cpu: list[float] = []
            for r in range(args.rounds):
                order = ["srun", "ddptui"] if r % 2 == 0 else ["ddptui", "srun"]
                for who in order:
                    times[who].append(by_srun(c, job, n, script) if who == "srun" else
                                      by_ddptui(c, job, n, work, script, cpu))
            c.scancel(job)
            s, d = median(times["srun"]), median(times["ddptui"])
            ok = d <= TARGET * s
            met &= ok
            print(f"{n:>5} {n * NPROC:>5} {s:>13.2f}s {d:>7.2f}s {d / s:>5.2f}x "
                  f"{median(cpu) / n:>15.2f}s"
                  f"{'' if ok else f'  (target {TARGET}x missed)'}", flush=True)
    print("all targets met" if met else "some target missed")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
