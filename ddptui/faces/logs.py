"""``ddptui logs``: past runs from the local run directory, readable without any node."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TextIO

from ddptui.events import JSON, LogLine, Metric, StackCount
from ddptui.nodelog import NodeLogParser
from ddptui.store import rundir
from ddptui.store.runs import (
    NODE_FILES_REMOVED,
    RunSummary,
    no_run,
    read_run,
    state_root,
    summary_of,
)


def _age(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def check_stale(base: Path, runs: list[RunSummary], out: TextIO) -> None:
    """Ask the nodes of every stale run what is left of it (``--check``), all at once."""
    from ddptui.afterwards.reconcile import check_run
    from ddptui.remote.reach import Done, map_at_once

    stale = [r for r in runs if r.stale]
    for got in map_at_once(stale, lambda r: check_run(base, r.run_id)):
        text = got.value.text() if isinstance(got, Done) else (
            f"run {got.item.run_id}: could not be checked: {got.error}")
        out.write(f"ddptui: {text}\n")


def show_logs(root: Path | None, run_id: str | None, *, rank: int | None = None,
              node: str | None = None, check: bool = False, out: TextIO = sys.stdout) -> int:
    from ddptui.afterwards.reconcile import list_settled

    base = state_root(root)
    if run_id is None:
        runs = list_settled(base)
        if check and any(r.stale for r in runs):
            check_stale(base, runs, out)
            runs = list_settled(base)
        if not runs:
            out.write(f"no runs under {rundir.runs_dir(base)}\n")
            return 0
        out.write(f"{'RUN ID':<24} {'STARTED':<19} {'STATUS':<9} {'EXIT':>4} {'WORLD':>5}  "
                  "NODES\n")
        for r in runs:
            code = "" if r.exit_code is None else str(r.exit_code)
            world = "" if r.world_size is None else str(r.world_size)
            gone = "  (node files removed)" if r.node_files_removed else ""
            gone += f"  ({r.attempts} attempts)" if r.attempts > 1 else ""
            out.write(f"{r.run_id:<24} {_age(r.started_at):<19} {r.shown_status:<9} "
                      f"{code:>4} {world:>5}  {r.where}{gone}\n")
        if any(r.stale for r in runs):
            out.write("?: the run's controller is gone and its end was not recorded; "
                      "`ddptui logs --check` asks its nodes, `ddptui attach RUN_ID` follows "
                      "it again\n")
        return 0
    try:
        attempts = read_run(base, run_id).get("attempts") or []
    except (OSError, ValueError):
        sys.stderr.write(f"ddptui: {no_run(base, run_id)}\n")
        return 2
    worst = 0
    for each in [run_id, *(a for a in attempts if isinstance(a, str))]:
        if each != run_id:
            out.write(attempt_line(base, each) + "\n")
        worst = max(worst, _one_run(base, each, rank=rank, node=node, check=check, out=out))
    return worst


def attempt_line(base: Path, run_id: str) -> str:
    """The head of a later attempt's lines, in a resubmitted run's log."""
    try:
        meta = read_run(base, run_id)
    except (OSError, ValueError):
        return f"ddptui: ---- {run_id}: its record cannot be read here"
    a = meta.get("attempt") or {}
    resumed = a.get("resumed_from") if isinstance(a, dict) else None
    step = (f"checkpoint step {resumed['step']}" if isinstance(resumed, dict)
            and resumed.get("step") is not None else "no checkpoint ddptui saw")
    number = a.get("number", "?") if isinstance(a, dict) else "?"
    job = a.get("job", "?") if isinstance(a, dict) else "?"
    return (f"ddptui: ---- attempt {number}: run {run_id} in Slurm job {job}, resumed from "
            f"{step} ----")


def _one_run(base: Path, run_id: str, *, rank: int | None, node: str | None, check: bool,
             out: TextIO) -> int:
    from ddptui.faces.headless import format_line

    d = rundir.run_dir(base, run_id)
    try:
        meta = read_run(base, run_id)
        if check:
            meta = check_one(base, run_id, meta, out)
    except (OSError, ValueError):
        sys.stderr.write(f"ddptui: {no_run(base, run_id)}\n")
        return 2
    if NODE_FILES_REMOVED in meta:  # what is here is all there is
        sys.stderr.write(f"ddptui: run {run_id}'s files on its nodes were removed by "
                         "`ddptui clean`; these are the local copies\n")
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
    if node is None:  # the whole run's view ends as the headless face's summary begins
        out.write(curves_report(d, meta))
        show_diagnosis(d, meta, record=check, out=out)
    return 0


def curves_report(run_dir: Path, meta: dict[str, JSON] | None = None) -> str:
    """What the run's curves tell, in the headless face's words: as ``run.json`` recorded it
    at the run's end, else judged again from its ``metrics.jsonl`` by the judge the live run
    had (:mod:`ddptui.insight`): a run whose session was killed recorded none."""
    from ddptui.faces.headless import insight_report
    from ddptui.insight.judge import Judge, Told
    from ddptui.metrics.points import Point, points

    recorded = (meta or {}).get("curves")
    if isinstance(recorded, list):
        return insight_report(Told(summary=tuple(str(line) for line in recorded)))

    judge = Judge()
    record: dict[str, float] = {}
    last: Point | None = None
    try:
        with open(run_dir / rundir.METRICS, encoding="utf-8") as f:
            for p in points(f):  # a record's values together, as the live judge had them
                if last is not None and (p.rank, p.step, p.time) != (last.rank, last.step,
                                                                     last.time):
                    judge.add(last.rank, last.node, last.step, record, last.time)
                    record = {}
                record[p.name], last = p.value, p
    except OSError:
        return ""
    if last is not None:
        judge.add(last.rank, last.node, last.step, record, last.time)
    for ev in _stack_counts(run_dir):  # the sampled stacks' counts (events.jsonl)
        judge.add_stacks(ev.node, ev.round, ev.counts, ev.problem, ev.cost)
    judge.judge(final=True)
    return insight_report(judge.told())


def _stack_counts(run_dir: Path) -> list[StackCount]:
    """The run's sampled stacks' counts, as its mirror wrote them (``store/mirror.py``)."""
    out = []
    try:
        with open(run_dir / rundir.EVENTS, encoding="utf-8") as f:
            for line in f:
                if '"stacks"' in line and (rec := json.loads(line)).get("type") == "stacks":
                    out.append(StackCount(rec["node"], rec["time"], rec["round"], {
                        int(r): (int(c[0]), int(c[1])) for r, c in rec["counts"].items()},
                        rec.get("problem") or "", rec.get("cost") or ""))
    except (OSError, ValueError, KeyError, TypeError):
        return out
    return out


def check_one(base: Path, run_id: str, meta: dict[str, JSON], out: TextIO) -> dict[str, JSON]:
    """``ddptui logs RUN_ID --check``: a stale run settled as in the listing (from local
    facts, else by asking its nodes); its ``run.json`` as it is then."""
    from ddptui.afterwards.reconcile import settle_locally

    run = settle_locally(base, summary_of(rundir.run_dir(base, run_id), meta))
    if run.stale:
        check_stale(base, [run], out)
    return read_run(base, run_id)


def show_diagnosis(run_dir: Path, meta: dict[str, JSON], *, record: bool, out: TextIO) -> None:
    """A failed run's diagnosis, in the headless face's words: the one ``run.json`` holds,
    else one made again from the stored logs (``record``: and kept there)."""
    from ddptui.afterwards.hindsight import run_diagnosis
    from ddptui.faces.headless import diagnosis_report

    found, why_not = run_diagnosis(run_dir, meta, record=record)
    if found is not None:
        out.write("\n".join(diagnosis_report(found)) + "\n")
    elif why_not is not None:
        sys.stderr.write(f"ddptui: run {meta.get('run_id', run_dir.name)} could not be "
                         f"diagnosed from its stored logs: {why_not}\n")


def _run_file(root: Path | None, run_id: str, name: str, what: str, why: str) -> Path | None:
    """A run's file ``name``, or None once the error that there is none is said."""
    base = state_root(root)
    d = rundir.run_dir(base, run_id)
    if not (d / rundir.RUN_JSON).exists():
        sys.stderr.write(f"ddptui: {no_run(base, run_id)}\n")
        return None
    if not (d / name).exists():
        sys.stderr.write(f"ddptui: run {run_id} recorded no {what} (no {name} in {d}){why}\n")
        return None
    return d / name


def show_telemetry(root: Path | None, run_id: str, *, node: str | None = None,
                   out: TextIO = sys.stdout) -> int:
    """``ddptui logs RUN_ID --telemetry``: every sample of the run's ``telemetry.jsonl``."""
    from ddptui.store.samples import read_telemetry
    from ddptui.telemetry.text import sample_line

    d = _run_file(root, run_id, rundir.TELEMETRY, "telemetry", "")
    if d is None:
        return 2
    for sample in read_telemetry(d.parent, node):
        out.write(sample_line(sample) + "\n")
    return 0


def show_metrics(root: Path | None, run_id: str, *, style: str = "table",
                 rank: int | None = None, node: str | None = None,
                 out: TextIO | None = None) -> int:
    """``ddptui logs RUN_ID --metrics``: every point the run recorded, one a line (``out``:
    stdout as it is when called)."""
    from ddptui.metrics.points import as_text, points

    out = sys.stdout if out is None else out
    path = _run_file(root, run_id, rundir.METRICS, "metrics",
                     ": its ranks printed no line ddptui reads as one")
    if path is None:
        return 2
    with open(path, encoding="utf-8", errors="replace") as f:
        found = (p for p in points(f) if (rank is None or p.rank == rank)
                 and (node is None or p.node == node))
        for line in as_text(found, style):
            out.write(line + "\n")
    return 0
