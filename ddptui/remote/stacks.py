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

from ddptui import nodeprog
from ddptui.config import HostsConfig
from ddptui.nodeprog import dump_stacks
from ddptui.rank_stacks import DUMP_TIMEOUT_S, NodeStacks, RankStack, Stacks, stacks_lines
from ddptui.remote import nodeops
from ddptui.store import rundir
from ddptui.transport.base import Transport

HOW_TO_GET = "pip install py-spy in the node's environment (the one of {python})"

#: The node program (:mod:`ddptui.nodeprog.dump_stacks`).
STACKS_SRC = nodeprog.source(dump_stacks)


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

