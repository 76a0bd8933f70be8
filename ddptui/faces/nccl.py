"""``ddptui nccl RUN_ID``: what NCCL chose on every node, and what looks wrong, without a
screen.

Read from the run directory's raw node logs, which hold every line whatever the store's rings
let go, and which the session keeps appending to while the run goes on: so the same
command answers for a past run and for a live one. Init times NCCL did not print itself come
from the facts ``run.json`` kept while the run was followed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from ddptui.events import Level, RunStatus
from ddptui.live.nccl_watch import NcclWatch
from ddptui.nccl import NcclFacts, NcclWarning, nccl_warnings, render_rank, render_table
from ddptui.nccl.facts import RankFacts
from ddptui.store import rundir
from ddptui.store.runs import no_run, read_run, state_root

_MARK = {Level.ERROR: "ERROR", Level.WARNING: "WARN ", Level.INFO: "note ",
         Level.DEBUG: "note "}


def warning_lines(warnings: list[NcclWarning]) -> list[str]:
    """The warnings as the command prints them: the advice, then NCCL's line behind it."""
    if not warnings:
        return ["NCCL: nothing looks wrong in what NCCL said about its setup."]
    out = [f"NCCL: {len(warnings)} thing(s) to look at:"]
    for w in warnings:
        out.append(f"  {_MARK[w.severity]} {w.text}")
        if w.evidence:
            out.append(f"        NCCL said: {w.evidence.strip()}")
    return out


def ranks_of(facts: NcclFacts, rank: int) -> list[tuple[str, RankFacts]]:
    """Every process that spoke as global rank ``rank`` (one per node it ran on)."""
    return [(n.node, r) for n in facts.nodes.values() for r in n.ranks.values()
            if r.rank == rank]


def load_facts(root: Path, run_id: str, meta: dict[str, Any]) -> NcclFacts:
    """Through the run's own gatherer, as an attach reads them: the same facts."""
    names = [n["name"] for n in meta.get("nodes", []) if isinstance(n, dict) and "name" in n]
    return NcclWatch.of_run(rundir.run_dir(root, run_id), names, meta.get("nccl")).facts


def show_nccl(root: Path | None, run_id: str, *, rank: int | None = None,
              as_json: bool = False, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    base = state_root(root)
    try:
        meta = read_run(base, run_id)
    except (OSError, ValueError):
        sys.stderr.write(f"ddptui: {no_run(base, run_id)}\n")
        return 2
    facts = load_facts(base, run_id, meta)
    status = RunStatus.read(meta.get("status"))
    if rank is not None:
        return _show_rank(facts, run_id, rank, as_json, out)
    warnings = nccl_warnings(facts)
    if as_json:
        json.dump({"run_id": run_id, "status": str(status),
                   "warnings": [w.to_dict() for w in warnings], "facts": facts.to_dict()},
                  out, indent=2)
        out.write("\n")
        return 0
    so_far = " (still running: what NCCL said so far)" if status.live else ""
    out.write(f"ddptui: NCCL in run {run_id}, {status}{so_far}\n")
    if facts.nodes:
        out.write("\n".join(warning_lines(warnings)) + "\n\n")
    out.write(render_table(facts) + "\n")
    return 0


def _show_rank(facts: NcclFacts, run_id: str, rank: int, as_json: bool, out: TextIO) -> int:
    found = ranks_of(facts, rank)
    if not found:
        known = sorted({r.rank for n in facts.nodes.values() for r in n.ranks.values()
                        if r.rank is not None})
        listing = ", ".join(map(str, known)) if known else "none"
        sys.stderr.write(f"ddptui: run {run_id} has no NCCL lines from rank {rank} (ranks "
                         f"with NCCL lines: {listing}); NCCL prints them with "
                         "NCCL_DEBUG=INFO\n")
        return 2
    if as_json:
        json.dump({"run_id": run_id, "rank": rank,
                   "processes": [{"node": node, **r.to_dict()} for node, r in found]},
                  out, indent=2)
        out.write("\n")
        return 0
    out.write("\n\n".join(render_rank(r, node) for node, r in found) + "\n")
    return 0
