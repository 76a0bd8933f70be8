"""The commands ddptui runs on a node, as text: pure, so their quoting is tested without a node.

Each is one shell string for ``Transport.run``. The probe and the stop program are Python
source run by the node's own interpreter (the one torchrun will use), because it is the one
program every node is known to have; nothing else is assumed beyond POSIX ``sh`` and
``setsid``.

Stop finds the run's processes by the ``DDPTUI_RUN`` marker in their environment rather
than by process group: torchrun starts every worker in a session of its own
(``start_new_session=True``), so a SIGKILLed agent would leave workers no group signal
reaches. The marker is inherited by every descendant, whatever it does with sessions.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass
from typing import Any

from ddptui.store import rundir

PROBE_SRC = r"""
import json, os, socket, sys
out = {"python": sys.executable, "version": sys.version.split()[0],
       "hostname": socket.gethostname()}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.cuda.is_available() if hasattr(torch, "cuda") else False
except Exception as e:
    out["torch_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""

STOP_SRC = r"""
import json, os, signal, sys, time
marker = sys.argv[1].encode()
grace = float(sys.argv[2])
pgid = int(sys.argv[3])
me = os.getpid()
try:  # so a controller following from elsewhere reports "stopped", not "failed"
    open(sys.argv[4], "w").close()
except OSError:
    pass

def members():
    found = set()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open("/proc/" + d + "/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/" + d + "/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields and fields[0] == b"Z":
            continue
        if marker in env or (pgid > 0 and int(fields[2]) == pgid):
            found.add(int(d))
    return found

def signal_all(pids, sig):
    if pgid > 0:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
    for p in pids:
        try:
            os.kill(p, sig)
        except OSError:
            pass

first = members()
signal_all(first, signal.SIGTERM)
deadline = time.monotonic() + grace
left = members()
while left and time.monotonic() < deadline:
    time.sleep(0.1)
    left = members()
killed = sorted(left)
if left:
    signal_all(left, signal.SIGKILL)
    end = time.monotonic() + 5
    while left and time.monotonic() < end:
        time.sleep(0.05)
        left = members()
print(json.dumps({"found": sorted(first), "killed": killed, "leftover": sorted(left)}))
"""

def marker(run_id: str, node_rank: int) -> str:
    return f"DDPTUI_RUN={run_id}/{node_rank}"


def python_cmd(python: str, src: str, *args: str) -> str:
    q = shlex.quote(python)
    quoted = " ".join(shlex.quote(a) for a in args)
    return (
        f"command -v {q} >/dev/null 2>&1 || "
        f"{{ echo 'ddptui: no such interpreter: '{q} >&2; exit 127; }}; "
        f"exec {q} -c {shlex.quote(src)} {quoted}"
    )


def probe_cmd(python: str) -> str:
    return python_cmd(python, PROBE_SRC)


def stop_cmd(python: str, run_id: str, node_rank: int, grace: float, pgid: int | None,
             node_dir: str) -> str:
    return python_cmd(python, STOP_SRC, marker(run_id, node_rank), f"{grace:g}", str(pgid or 0),
                      rundir.in_node_dir(node_dir, rundir.STOP_REQUESTED))


def mkdir_cmd(*paths: str) -> str:
    return "mkdir -p -- " + " ".join(shlex.quote(p) for p in paths)


def start_cmd(node_dir: str) -> str:
    """Start launch.sh detached: own session, output appended to node.log, no tty, no stdin.

    The shell that ssh runs returns at once; the job survives the connection closing.
    """
    d = shlex.quote(node_dir)
    return (
        f"cd {d} && (setsid sh {rundir.LAUNCH_SCRIPT} >> {rundir.NODE_LOG} 2>&1 < /dev/null &)"
        " && echo started"
    )


def alive_cmd(pgid: int) -> str:
    """Exit 0 while any process of the group lives."""
    return f"kill -0 -{int(pgid)} 2>/dev/null"  # dash has no `--` for kill


def remove_cmd(path: str) -> str:
    return "rm -rf -- " + shlex.quote(path)


def remove_run_cmd(node_dir: str) -> str:
    """Undo a launch on a node: its node dir, and the run's dir above it once empty."""
    parent = shlex.quote(posixpath.dirname(node_dir.rstrip("/")))
    return f"{remove_cmd(node_dir)} && {{ rmdir -- {parent} 2>/dev/null; true; }}"


@dataclass(frozen=True)
class Probe:
    python: str
    version: str
    hostname: str
    torch: str | None
    torch_error: str | None
    cuda: bool = False


def _last_json(stdout: str, key: str) -> dict[str, Any] | None:
    """The last line that is a JSON object with ``key``: a login banner may come before it."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and key in d:
            return d
    return None


def parse_probe(stdout: str) -> Probe | None:
    d = _last_json(stdout, "python")
    if d is None:
        return None
    return Probe(str(d["python"]), str(d.get("version", "")), str(d.get("hostname", "")),
                 d.get("torch"), d.get("torch_error"), bool(d.get("cuda", False)))


@dataclass(frozen=True)
class StopResult:
    found: list[int]
    killed: list[int]
    leftover: list[int]


def parse_stop(stdout: str) -> StopResult | None:
    d = _last_json(stdout, "leftover")
    if d is None:
        return None
    return StopResult(list(d["found"]), list(d["killed"]), list(d["leftover"]))
