"""The ranks' Python stacks, taken on their nodes with ``py-spy dump``: why a rank is stuck.

A stalled rank prints nothing, so its log cannot say where it is; its stack can. On each
node, a small program run by the node's own interpreter finds the run's rank processes (by
the ``DDPTUI_RUN`` marker that every process of the run carries, as stop finds them, and the
``RANK``/``LOCAL_RANK`` that torchrun gives each worker) and runs ``py-spy dump`` on each, at
once. py-spy is looked for on the node's ``PATH`` and beside the interpreter; without it,
ddptui says how to get it. Reading another process's memory needs ptrace: as root, or as the
same user with ``kernel.yama.ptrace_scope`` at 0 or 1 (py-spy says so when it is refused).

The command and the reading of its answer are pure; :func:`collect` runs it over transports
the caller holds (the controller's, or fresh ones for ``ddptui stacks``), and does not load
paramiko itself, so the dashboard can import the types.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ddptui import nodeprog
from ddptui.config import HostsConfig
from ddptui.nodeprog import dump_stacks
from ddptui.remote import nodeops
from ddptui.store import rundir
from ddptui.transport.base import Transport

#: Seconds one ``py-spy dump`` may take (it pauses the rank while it reads).
DUMP_TIMEOUT_S = 10.0
HOW_TO_GET = "pip install py-spy in the node's environment (the one of {python})"
PTRACE_HINT = (" (py-spy reads the rank's memory with ptrace: run ddptui's user as root on the "
               "node, or as the ranks' own user with kernel.yama.ptrace_scope at 0 or 1)")

#: The node program (:mod:`ddptui.nodeprog.dump_stacks`).
STACKS_SRC = nodeprog.source(dump_stacks)


@dataclass(frozen=True)
class RankStack:
    node: str
    rank: int
    local_rank: int | None
    pid: int
    stack: str
    """``py-spy dump``'s output, as it printed it."""
    error: str = ""


@dataclass(frozen=True)
class NodeStacks:
    node: str
    ranks: list[RankStack] = field(default_factory=list)
    problem: str = ""
    """Why this node gave no stacks: no py-spy, not reachable, no rank process left."""


@dataclass(frozen=True)
class Stacks:
    """One collection: each asked node's answer, and the file it was saved to."""

    run_id: str
    time: float
    nodes: list[NodeStacks]
    saved: str = ""

    def for_rank(self, rank: int) -> RankStack | None:
        return next((s for n in self.nodes for s in n.ranks if s.rank == rank), None)


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


def rank_lines(s: RankStack) -> list[str]:
    """One rank's stack: a head naming rank, node and pid, then py-spy's lines."""
    head = f"rank {s.rank} on {s.node} (pid {s.pid})"
    if s.error:
        hint = PTRACE_HINT if "ermission denied" in s.error or "not permitted" in s.error else ""
        return [f"{head}: py-spy could not read it: {s.error}{hint}"]
    if not s.stack.strip():
        return [f"{head}: no stack taken"]
    return [f"{head}:", *("  " + ln for ln in s.stack.rstrip().splitlines())]


def node_lines(node: NodeStacks, rank: int | None = None) -> list[str]:
    """A node's answer: why it has no stacks, or each rank's (``rank``'s only)."""
    out = [node.problem] if node.problem else []
    if not node.problem.startswith("py-spy is not"):  # then there is only the pid to show
        for s in node.ranks:
            if rank is None or s.rank == rank:
                out.extend(rank_lines(s))
    return out


def stacks_lines(stacks: Stacks, rank: int | None = None) -> list[str]:
    """Every rank's stack (or ``rank``'s only), with what ddptui reads in them first."""
    out: list[str] = []
    if rank is None and (verdict := read_stacks(stacks)):
        out.append(verdict)
    for node in stacks.nodes:
        out.extend(node_lines(node, rank))
    if rank is not None and stacks.for_rank(rank) is None and not any(
            n.problem for n in stacks.nodes):
        out.append(f"rank {rank} has no process of this run on any node")
    return out


# py-spy's frame lines: `    all_reduce (torch/distributed/distributed_c10d.py:2501)`
_FRAME_RE = re.compile(r"^ +(\S+) \((.+?)(?::(\d+))?\)\s*$")
#: Where a rank that waits for its peers is: inside a collective, or in a backward whose
#: gradient hooks are one.
_WAITING = ("torch/distributed/", "torch/nn/parallel/distributed", "torch/autograd/")


def main_frames(stack: str) -> list[str]:
    """The main thread's frames, innermost first (as py-spy prints them)."""
    threads: list[tuple[str, list[str]]] = []
    for line in stack.splitlines():
        if line.startswith("Thread "):
            threads.append((line, []))
        elif threads and (m := _FRAME_RE.match(line)) is not None:
            where = m.group(2) + (f":{m.group(3)}" if m.group(3) else "")
            threads[-1][1].append(f"{m.group(1)} ({where})")
    main = [frames for head, frames in threads if '"MainThread"' in head]
    return main[0] if main else (threads[0][1] if threads else [])


def waiting(stack: str) -> bool:
    return any(w in frame for frame in main_frames(stack) for w in _WAITING)


def read_stacks(stacks: Stacks) -> str:
    """Which rank the others wait for, when the stacks say: the ranks outside any
    collective, while the rest wait inside one."""
    every = [s for n in stacks.nodes for s in n.ranks if s.stack.strip() and not s.error]
    stuck = [s for s in every if not waiting(s.stack)]
    waits = [s for s in every if waiting(s.stack)]
    if not stuck or not waits:
        return ""
    who = ", ".join(f"rank {s.rank} on {s.node} (in {(main_frames(s.stack) or ['?'])[0]})"
                    for s in stuck)
    ranks = ", ".join(str(s.rank) for s in waits)
    return (f"ddptui: {who} {'is' if len(stuck) == 1 else 'are'} in no collective while "
            f"rank{'s' if len(waits) > 1 else ''} {ranks} wait in one: look there first")
