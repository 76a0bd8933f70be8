"""What the scale benchmarks share: a namespace cluster, hosts files, ddptui and its baselines.

The cluster is the test suite's (``tests/cluster.py``): up to 16 network namespaces on this
machine, each with its own hostname and OpenSSH sshd, sharing the file system and the CPU.
Every baseline runs the same ``python -m torch.distributed.run`` command that a user would
type, through the real OpenSSH client with the cluster's ssh_config, so a comparison differs
only in how the command reaches the nodes and how the output comes back.
"""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from cluster import Cluster, Host  # noqa: E402  (tests/ on the path first)

PDSH = "/usr/bin/pdsh"
#: Below Linux's ephemeral range (32768-60999), which the hosts' own connections use.
_ports = itertools.count(20000 + os.getpid() % 1000 * 12)


def next_port() -> int:
    """A fresh rendezvous port per launch: a closed store's port may sit in TIME_WAIT."""
    return next(_ports)


def with_bytecode(root: Path) -> None:
    """ddptui's bytecode, as an install has it (pip compiles it then; a first run writes it):
    this machine sets PYTHONDONTWRITEBYTECODE=1, which would make every ``ddptui`` the
    benchmarks start compile its hundred modules again (0.1 s of each start-up). Kept under
    ``root``, for every process the benchmark starts here; the nodes' torch has its own."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "ddptui")],
                   check=True, stdout=subprocess.DEVNULL)


def make_cluster(k: int, root: Path | None = None) -> Cluster:
    """The cluster (and ddptui's bytecode under its root, see :func:`with_bytecode`)."""
    root = root or Path(tempfile.mkdtemp(prefix="ddptui-bench-cluster-"))
    with_bytecode(root)
    t0 = time.perf_counter()
    c = Cluster.create(root, k)
    print(f"cluster of {k} namespace hosts built in {time.perf_counter() - t0:.2f} s",
          flush=True)
    return c


def hosts_file(c: Cluster, hosts: Sequence[Host], work: Path, script: str, *,
               nproc: int = 1, env: dict[str, str] | None = None,
               stop_grace: float | None = None, local: bool = False) -> Path:
    """A hosts file running ``script`` (its text) on ``hosts``; ``local``: one local node."""
    project = work / "project"  # what ddptui syncs: the script alone, nothing that changes
    project.mkdir(parents=True, exist_ok=True)
    (project / "job.py").write_text(script)
    nodes: list[dict[str, Any]]
    if local:
        nodes = [{"host": "localhost", "transport": "local", "workdir": str(work / "wd-local")}]
    else:
        nodes = [{"host": h.name, "workdir": str(work / f"wd-{h.name}")} for h in hosts]
    job: dict[str, Any] = {"script": "job.py"}
    if stop_grace is not None:
        job["stop_grace"] = stop_grace
    d: dict[str, Any] = {
        "defaults": {"python": sys.executable, "nproc_per_node": nproc, "env": env or {}},
        "nodes": nodes,
        "rendezvous": {"backend": "c10d", "port": next_port()},
        "job": job,
        "ssh": {"config_file": str(c.ssh_config), "known_hosts": str(c.known_hosts),
                "connect_timeout": 20},
    }
    path = project / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def ddptui_argv(state: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "ddptui.cli", "--state-dir", str(state), *args]


def torchrun_cmd(n_nodes: int, endpoint: str, script: Path, nproc: int = 1) -> str:
    """The command a user would start on every node (c10d rendezvous, as ddptui does)."""
    return shlex.join([
        sys.executable, "-m", "torch.distributed.run", "--nnodes", str(n_nodes),
        "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"{endpoint}:{next_port()}",
        "--rdzv-id", f"bench{time.monotonic_ns()}", str(script)])


def pdsh_env(c: Cluster) -> dict[str, str]:
    """pdsh over OpenSSH with the cluster's ssh_config (what a pdsh user sets up once)."""
    return {**os.environ, "PDSH_RCMD_TYPE": "ssh",
            "PDSH_SSH_ARGS": f"-F {c.ssh_config} -x -l%u %h"}


def pdsh_argv(hosts: Sequence[Host], cmd: str) -> list[str]:
    return [PDSH, "-f", "64", "-w", ",".join(h.name for h in hosts), cmd]


def wait_for_lines(proc: subprocess.Popen[bytes], wanted: set[str], timeout: float,
                   on_line: Callable[[str], None] | None = None) -> float:
    """Read ``proc``'s stdout until every string in ``wanted`` was in some line; the time."""
    assert proc.stdout is not None
    left = set(wanted)
    deadline = time.monotonic() + timeout
    for raw in proc.stdout:
        line = raw.decode(errors="replace")
        if on_line:
            on_line(line)
        left = {w for w in left if w not in line}
        if not left:
            return time.perf_counter()
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"{proc.args!r}: never printed {sorted(left)[:4]}")


def finish(proc: subprocess.Popen[bytes], timeout: float = 120) -> int:
    """Drain and reap ``proc`` (bounded); its exit code."""
    try:
        proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    return proc.returncode


def run_leftovers(c: Cluster, hosts: Sequence[Host]) -> list[int]:
    """Processes in these hosts other than their sshd listeners."""
    left: list[int] = []
    for h in hosts:
        listeners = {p.pid for p in h.sshd_procs}
        left += [p for p in c.pids(h) if p not in listeners]
    return left


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
