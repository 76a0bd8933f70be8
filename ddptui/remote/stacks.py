"""The ranks' Python stacks, taken on their nodes with ``py-spy dump``: why a rank is stuck.

A stalled rank prints nothing, so its log cannot say where it is; its stack can. On each
node, a small program run by the node's own interpreter finds the run's rank processes (by
the ``DDPTUI_RUN`` marker that every process of the run carries, as stop finds them, and the
``RANK``/``LOCAL_RANK`` that torchrun gives each worker) and runs ``py-spy dump`` on each, at
once. py-spy is looked for on the node's ``PATH`` and beside the interpreter; without it,
ddptui says how to get it. Reading another process's memory needs ptrace: as root, or as the
same user with ``kernel.yama.ptrace_scope`` at 0 or 1 (py-spy says so when it is refused).

The command and the reading of its answer are pure; :func:`collect` runs it over transports
the caller holds (the session's, or fresh ones for ``ddptui stacks``). What it answers,
and ddptui's words for it, are plain (:mod:`ddptui.rank_stacks`): the faces import those.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ddptui.config import HostsConfig
from ddptui.rank_stacks import DUMP_TIMEOUT_S, NodeStacks, RankStack, Stacks, stacks_lines
from ddptui.remote import nodeops
from ddptui.store import rundir
from ddptui.transport.base import Transport

HOW_TO_GET = "pip install py-spy in the node's environment (the one of {python})"

STACKS_SRC = nodeops.PROCS_SRC + r"""
import json, shutil, subprocess, sys
marker, want, timeout = sys.argv[1].encode(), sys.argv[2], float(sys.argv[3])
want = {int(r) for r in want.split(",") if r}
found = {}
for pid, env, fields in procs():
    if marker not in env:
        continue
    vals = dict(e.split(b"=", 1) for e in env if b"=" in e)
    rank = vals.get(b"RANK", b"")
    if rank.isdigit():
        local = vals.get(b"LOCAL_RANK", b"")
        found[pid] = (int(rank), int(local) if local.isdigit() else None, int(fields[1]))
ranks = {}
for pid, (rank, local, ppid) in sorted(found.items()):
    # a rank's own process; a data loader's worker has the same RANK and the rank as parent
    if found.get(ppid, (None,))[0] != rank and (not want or rank in want):
        ranks[rank] = (pid, local)
spy = shutil.which("py-spy")
beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
if spy is None and os.access(beside, os.X_OK):
    spy = beside
out = {"py_spy": spy, "python": sys.executable, "ranks": []}
running = []
for rank, (pid, local) in sorted(ranks.items()):
    p = None
    if spy:
        p = subprocess.Popen([spy, "dump", "--pid", str(pid)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    running.append((rank, pid, local, p))
for rank, pid, local, p in running:
    stack, err = "", ""
    if p is not None:
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
            se = b"py-spy did not answer within %g s" % timeout
        stack = so.decode("utf-8", "replace")
        if p.returncode:
            err = se.decode("utf-8", "replace").strip() or "py-spy exited %d" % p.returncode
    out["ranks"].append({"rank": rank, "local_rank": local, "pid": pid, "stack": stack,
                         "error": err})
print(json.dumps(out))
"""


def stacks_cmd(python: str, run_id: str, node_rank: int, ranks: set[int] | None = None,
               timeout: float = DUMP_TIMEOUT_S) -> str:
    want = ",".join(str(r) for r in sorted(ranks or ()))
    return nodeops.python_cmd(python, STACKS_SRC, nodeops.marker(run_id, node_rank), want,
                              f"{timeout:g}")


def parse_stacks(node: str, python: str, stdout: str, stderr: str = "") -> NodeStacks:
    d: dict[str, Any] | None = nodeops.last_json(stdout, "ranks")
    if d is None:
        why = stderr.strip().splitlines()[-1:] or ["no answer"]
        return NodeStacks(node, problem=f"the stacks program failed on {node}: {why[0]}")
    ranks = [RankStack(node, int(r["rank"]), r.get("local_rank"), int(r["pid"]),
                       str(r.get("stack", "")), str(r.get("error", ""))) for r in d["ranks"]]
    if d.get("py_spy") is None:
        return NodeStacks(node, ranks, f"py-spy is not on {node}: "
                                       + HOW_TO_GET.format(python=d.get("python") or python))
    if not ranks:
        return NodeStacks(node, problem=f"no rank process of this run is alive on {node}")
    return NodeStacks(node, ranks)


def collect(run_id: str, config: HostsConfig, transports: Mapping[str, Transport], *,
            nodes: list[str] | None = None, rank: int | None = None) -> list[NodeStacks]:
    """The stacks of the ranks on ``nodes`` (default: every node), or of ``rank`` only."""
    from ddptui.remote.reach import Done, map_at_once  # here: the dashboard imports the types

    names = nodes or [n.name for n in config.nodes]
    want = None if rank is None else {rank}

    def one(name: str) -> NodeStacks:
        node = config.node(name)
        transport = transports.get(name)
        if transport is None:
            return NodeStacks(name, problem=f"{name} is not connected")
        res = transport.run(stacks_cmd(node.python, run_id, config.node_rank(node), want),
                            timeout=DUMP_TIMEOUT_S + 30)
        return parse_stacks(name, node.python, res.stdout, res.stderr)

    out = [got.value if isinstance(got, Done)
           else NodeStacks(got.item, problem=f"could not reach {got.item}: {got.error}")
           for got in map_at_once(names, one)]
    if rank is not None:  # only the node that holds the rank has something to say
        holding = [n for n in out if n.ranks]
        if holding:
            return holding
    return out


def save(run_dir: Path, stacks: Stacks) -> Stacks:
    """Write the collection under the run dir; the same collection, naming its file."""
    stamp = datetime.fromtimestamp(stacks.time).strftime("%Y%m%d-%H%M%S-%f")[:-3]
    path = rundir.stacks_file(run_dir, stamp)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(stacks_lines(stacks)) + "\n")
    return Stacks(stacks.run_id, stacks.time, stacks.nodes, str(path))


def take(run_id: str, config: HostsConfig, transports: Mapping[str, Transport], run_dir: Path,
         *, nodes: list[str] | None = None, rank: int | None = None,
         mask: Callable[[str], str] = str) -> Stacks:
    """Collect and save; ``mask`` hides secret values (a rank's command line is in its
    stack's head) before anything is kept or shown."""
    answers = [NodeStacks(n.node, [replace(s, stack=mask(s.stack), error=mask(s.error))
                                   for s in n.ranks], mask(n.problem))
               for n in collect(run_id, config, transports, nodes=nodes, rank=rank)]
    return save(run_dir, Stacks(run_id, time.time(), answers))

