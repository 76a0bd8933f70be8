"""Launch time: from ``ddptui run --headless`` to the first line of every rank, 1 to 16 hosts.

One command: ``python bench/launch.py`` (as root: it builds a namespace cluster of 16 hosts
with their own sshd, see ``tests/cluster.py``). Every host runs one process of a script that
prints one line and exits. For each size, in the same run and in rotating order, the same
``python -m torch.distributed.run`` command (c10d rendezvous on the first host) is started

* by ``ddptui run --headless`` (connect, probe, upload, start, follow);
* by a sequential loop of ``ssh host 'nohup torchrun ... &'``, one host after the other, the
  way a shell ``for`` loop does it; its ranks' lines are read from the node logs locally, which
  favours this baseline (a real user would ssh again to read them);
* by ``pdsh -w host1,...`` over OpenSSH (Debian's pdsh, ``PDSH_RCMD_TYPE=ssh``), whose output
  comes back on the ssh sessions it keeps open.

And once more on one local node (``transport: local``) against the same torchrun started by
hand: what ddptui adds where there is no SSH at all. Each figure is the median of ``--rounds``.

Targets: 16 hosts <= 1.5x 1 host; <= 1/3 of the ssh loop at 16 hosts; <= pdsh at every
size; one local node <= 1.2x bare torchrun. On a machine whose cores are fewer than the
hosts, every host's torchrun (~1.5 s of CPU to import torch) queues for the same cores: the
16/1 ratio then measures the machine, so it is printed beside pdsh's own 16/1 ratio.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_setup import (
    ROOT,
    Cluster,
    Host,
    ddptui_argv,
    finish,
    hosts_file,
    make_cluster,
    median,
    next_port,
    pdsh_argv,
    pdsh_env,
    torchrun_cmd,
    wait_for_lines,
)

SCRIPT = "import os\nprint(f\"hello from rank {os.environ['RANK']}\", flush=True)\n"
TIMEOUT_S = 240.0


def _wanted(n: int) -> set[str]:
    return {f"hello from rank {r}" for r in range(n)}


#: The phases ``ddptui run --headless`` announces, in order, and where each one's time went.
PHASES = ("connecting", "uploading", "starting", "running")
phase_times: dict[int, list[dict[str, float]]] = {}


def time_ddptui(c: Cluster, hosts: list[Host], work: Path, local: bool = False) -> float:
    path = hosts_file(c, hosts, work, SCRIPT, local=local)
    marks: dict[str, float] = {}

    def mark(line: str) -> None:
        for phase in PHASES:
            if f"── {phase}" in line and phase not in marks:
                marks[phase] = time.perf_counter()

    t0 = time.perf_counter()
    proc = subprocess.Popen(ddptui_argv(work / "state", "run", str(path), "--headless"),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    t1 = wait_for_lines(proc, _wanted(1 if local else len(hosts)), TIMEOUT_S, mark)
    if finish(proc) != 0:
        raise RuntimeError(f"ddptui run exited {proc.returncode}")
    if len(marks) == len(PHASES):
        edges = [t0, *(marks[p] for p in PHASES), t1]
        names = ["start-up", "reach+preflight", "upload", "start", "first lines"]
        phase_times.setdefault(0 if local else len(hosts), []).append(
            {n: b - a for n, a, b in zip(names, edges, edges[1:], strict=False)})
    return t1 - t0


def phase_line(n: int) -> str:
    got = phase_times.get(n, [])
    if not got:
        return ""
    return ", ".join(f"{k} {median([g[k] for g in got]):.2f}" for k in got[0])


def time_ssh_loop(c: Cluster, hosts: list[Host], work: Path) -> float:
    work.mkdir(parents=True, exist_ok=True)
    script = work / "job.py"
    script.write_text(SCRIPT)
    cmd = torchrun_cmd(len(hosts), hosts[0].name, script)
    logs = [work / f"ssh-{h.name}.log" for h in hosts]
    t0 = time.perf_counter()
    for h, log in zip(hosts, logs, strict=True):
        subprocess.run(c.ssh_argv(h, f"nohup {cmd} > {log} 2>&1 < /dev/null &"),
                       check=True, timeout=60, stdin=subprocess.DEVNULL)
    wanted = _wanted(len(hosts))
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        text = "".join(p.read_text(errors="replace") for p in logs if p.exists())
        if all(w in text for w in wanted):
            return time.perf_counter() - t0
        if time.monotonic() > deadline:
            raise RuntimeError(f"ssh loop: ranks never spoke: {text[-500:]}")
        time.sleep(0.01)


def time_pdsh(c: Cluster, hosts: list[Host], work: Path) -> float:
    work.mkdir(parents=True, exist_ok=True)
    script = work / "job.py"
    script.write_text(SCRIPT)
    cmd = torchrun_cmd(len(hosts), hosts[0].name, script)
    t0 = time.perf_counter()
    proc = subprocess.Popen(pdsh_argv(hosts, cmd), env=pdsh_env(c), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    t = wait_for_lines(proc, _wanted(len(hosts)), TIMEOUT_S) - t0
    finish(proc)
    return t


def time_bare_local(work: Path) -> float:
    work.mkdir(parents=True, exist_ok=True)
    script = work / "job.py"
    script.write_text(SCRIPT)
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
            "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{next_port()}", str(script)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    t = wait_for_lines(proc, _wanted(1), TIMEOUT_S) - t0
    finish(proc)
    return t


def rounds_of(methods: dict[str, Callable[[Path], float]], rounds: int,
              work: Path) -> dict[str, float]:
    """Median per method; the order rotates each round so drift hits every method alike."""
    got: dict[str, list[float]] = {m: [] for m in methods}
    names = list(methods)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            got[name].append(methods[name](work / f"{name}-{r}"))
    return {m: median(v) for m, v in got.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--rounds", type=int, default=1)
    opts = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ddptui-bench-launch-"))
    c = make_cluster(max(opts.sizes), work / "cluster")
    rows: dict[int, dict[str, float]] = {}
    try:
        local = rounds_of({
            "ddptui": lambda w: time_ddptui(c, [], w, local=True),
            "bare": time_bare_local,
        }, opts.rounds, work / "local")
        print(f"one local node: ddptui {local['ddptui']:.2f} s, bare torchrun "
              f"{local['bare']:.2f} s, ratio {local['ddptui'] / local['bare']:.2f} "
              f"(target <= 1.2)\n    ddptui's time by phase, s: {phase_line(0)}", flush=True)
        for n in opts.sizes:
            hosts = c.hosts[:n]
            rows[n] = rounds_of({
                "ddptui": lambda w, hosts=hosts: time_ddptui(c, hosts, w),
                "ssh": lambda w, hosts=hosts: time_ssh_loop(c, hosts, w),
                "pdsh": lambda w, hosts=hosts: time_pdsh(c, hosts, w),
            }, opts.rounds, work / f"n{n}")
            r = rows[n]
            print(f"{n:2d} hosts: ddptui {r['ddptui']:.2f} s, ssh loop {r['ssh']:.2f} s, "
                  f"pdsh {r['pdsh']:.2f} s; ddptui/ssh {r['ddptui'] / r['ssh']:.2f}, "
                  f"ddptui/pdsh {r['ddptui'] / r['pdsh']:.2f} (target <= 1)\n"
                  f"    ddptui's time by phase, s: {phase_line(n)}", flush=True)
    finally:
        c.close()
        shutil.rmtree(work, ignore_errors=True)
    ok = local["ddptui"] / local["bare"] <= 1.2
    ok &= all(r["ddptui"] <= r["pdsh"] for r in rows.values())
    lo, hi = min(rows), max(rows)
    if hi > lo:
        grow, pdsh_grow = (rows[hi]["ddptui"] / rows[lo]["ddptui"],
                           rows[hi]["pdsh"] / rows[lo]["pdsh"])
        ssh_share = rows[hi]["ddptui"] / rows[hi]["ssh"]
        print(f"{hi} hosts / {lo} host: ddptui {grow:.2f} (target <= 1.5), pdsh {pdsh_grow:.2f}; "
              f"ddptui / ssh loop at {hi} hosts {ssh_share:.2f} (target <= 0.33)")
        ok &= grow <= 1.5 and (hi < 16 or ssh_share <= 1 / 3)
    print("all targets met" if ok else "some target missed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
