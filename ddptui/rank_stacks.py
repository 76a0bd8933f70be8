"""The ranks' Python stacks as plain data, and how ddptui words them.

Taking stacks needs the nodes (:mod:`ddptui.remote.stacks`); showing them does not. The
dashboard, the headless faces and the engine's wire need only these types and words, so they
live here, apart from every connection: a face that imports them loads nothing of ``remote``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Seconds one ``py-spy dump`` may take (it pauses the rank while it reads); the dashboard
#: waits for the stacks that long and more.
DUMP_TIMEOUT_S = 10.0
PTRACE_HINT = (" (py-spy reads the rank's memory with ptrace: run ddptui's user as root on the "
               "node, or as the ranks' own user with kernel.yama.ptrace_scope at 0 or 1)")


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
