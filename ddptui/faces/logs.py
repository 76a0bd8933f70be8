"""``ddptui logs``: past runs from the local run directory, readable without any node."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from ddptui.events import LogLine, Metric, NodeLogParser
from ddptui.store import rundir
from ddptui.store.runs import list_runs, read_run, state_root


def _age(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def show_logs(root: Path | None, run_id: str | None, *, rank: int | None = None,
              node: str | None = None, out: TextIO = sys.stdout) -> int:
    from ddptui.faces.headless import format_line

    base = state_root(root)
    if run_id is None:
        runs = list_runs(base)
        if not runs:
            out.write(f"no runs under {rundir.runs_dir(base)}\n")
            return 0
        out.write(f"{'RUN ID':<24} {'STARTED':<19} {'STATUS':<9} {'EXIT':>4} {'WORLD':>5}  "
                  "NODES\n")
        for r in runs:
            code = "" if r.exit_code is None else str(r.exit_code)
            world = "" if r.world_size is None else str(r.world_size)
            out.write(f"{r.run_id:<24} {_age(r.started_at):<19} {r.status:<9} {code:>4} "
                      f"{world:>5}  {','.join(r.nodes)}\n")
        return 0
    d = rundir.run_dir(base, run_id)
    try:
        meta = read_run(base, run_id)
    except (OSError, ValueError):
        sys.stderr.write(f"ddptui: no run {run_id!r} under {rundir.runs_dir(base)}; `ddptui logs` "
                         "lists them\n")
        return 2
    if rank is not None:
        p = rundir.rank_log(d, rank)
        if not p.exists():
            sys.stderr.write(f"ddptui: run {run_id} has no lines from rank {rank}\n")
            return 2
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                out.write(chunk.decode("utf-8", "replace"))
        return 0
    names = [n["name"] for n in meta.get("nodes", [])]
    if node is not None:
        if node not in names:
            sys.stderr.write(f"ddptui: run {run_id} has no node {node!r} (nodes: "
                             f"{', '.join(names)})\n")
            return 2
        names = [node]
    for name in names:
        p = rundir.node_log(d, name)
        if not p.exists():
            continue
        parser = NodeLogParser(name)
        with open(p, "rb") as f:
            for raw in f:
                for ev in parser.feed(raw.decode("utf-8", "replace"), 0.0):
                    # metric records as printed: this is a log, not a chart
                    line = ev.as_line() if isinstance(ev, Metric) else ev
                    if isinstance(line, LogLine):
                        out.write(format_line(line) + "\n")
    return 0
