"""Small user scripts and hosts files for the run tests: real torchrun jobs, kept short."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

# A user script (not the bundled worker): numbered lines, metric lines, a hook to fail.
NUMBERED = r'''
import json, os, sys, time
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    n, delay = int(os.environ.get("JOB_LINES", "20")), float(os.environ.get("JOB_DELAY", "0"))
    fail_rank = int(os.environ.get("JOB_FAIL_RANK", "-1"))
    dist.init_process_group("gloo")
    r = dist.get_rank()
    if r == 0:
        print("ARGV " + json.dumps(sys.argv[1:]), flush=True)
        print("ENV " + json.dumps({k: v for k, v in os.environ.items() if k.startswith("JOBV_")}),
              flush=True)
    for i in range(n):
        print(f"[seq {i}] rank {r} says hello", flush=True)
        print("@ddptui " + json.dumps({"v": 1, "kind": "metric", "rank": r, "step": i,
                                        "loss": 1.0 / (i + 1)}), flush=True)
        if r == fail_rank and i == n // 2:
            raise RuntimeError(f"rank {r} gave up at line {i}")
        time.sleep(delay)
    hold = os.environ.get("JOB_HOLD")  # a file the test makes when the job may end
    deadline = time.monotonic() + 120
    while hold and not os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(0.05)
    dist.barrier()
    dist.destroy_process_group()

main()
'''

SEQ_RE = re.compile(r"^\[seq (\d+)\] rank (\d+) says hello$")


def write_job(tmp: Path, hosts: dict[str, Any]) -> Path:
    (tmp / "job.py").write_text(NUMBERED)
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump(hosts, sort_keys=False, allow_unicode=True))
    return path


def ddptui(*args: str, state: Path, timeout: float = 240, env: dict[str, str] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "--state-dir", str(state), *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )


def spawn_ddptui(*args: str, state: Path, out: Path, env: dict[str, str] | None = None
                 ) -> subprocess.Popen[bytes]:
    f = open(out, "wb")  # noqa: SIM115 - handed to the child
    return subprocess.Popen([sys.executable, "-m", "ddptui.cli", "--state-dir", str(state), *args],
                            stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})


def wait_for(path: Path, text: str, timeout: float, proc: subprocess.Popen[bytes]) -> str:
    """The output of a ddptui writing to ``path`` once it holds ``text`` (bounded)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        got = path.read_text(errors="replace")
        if text in got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} (within {timeout} s, while ddptui ran):\n"
                         f"{path.read_text()[-4000:]}")


def run_id_of(output: str) -> str:
    m = re.search(r"ddptui: run (\S+):", output)
    assert m, output[:2000]
    return m.group(1)


def seqs(path: Path) -> list[int]:
    out = []
    for line in path.read_text().splitlines():
        m = SEQ_RE.match(line)
        if m:
            out.append(int(m.group(1)))
    return out


def marked_pids(run_id: str) -> list[int]:
    """Every process on this machine (all namespaces share its PIDs) carrying the run marker."""
    pids = []
    want = f"DDPTUI_RUN={run_id}/".encode()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                env = Path(f"/proc/{d}/environ").read_bytes()
            except OSError:
                continue
            if any(e.startswith(want) for e in env.split(b"\0")):
                pids.append(int(d))
    return pids


def leaders(tmp: Path, run_id: str) -> list[str]:
    """What leads each node's process group, as run.json names it (the nodes share this
    machine's PIDs): "warm" for a warm torchrun (``launch/warm.py``), "launch.sh" for one
    started in order."""
    meta = json.loads((tmp / "state" / "runs" / run_id / "run.json").read_text())
    said = []
    for n in meta["nodes"]:
        argv = Path(f"/proc/{n['pgid']}/cmdline").read_bytes().split(b"\0")
        said.append("warm" if b"--ddptui-warm" in argv else
                    "launch.sh" if any(a.endswith(b"launch.sh") for a in argv) else repr(argv))
    return said
