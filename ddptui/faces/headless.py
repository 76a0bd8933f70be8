"""The headless face: every line, prefixed with its node and global rank, on stdout.

It prints from the session's consumer thread through a listener, so it sees every line
in order (the store's rings are for screens, which may skip; a log printer may not). A failed
run's summary leads with ddptui's diagnosis: torch's launcher text explains nothing to a person.
"""

from __future__ import annotations

import sys
from typing import TextIO

from ddptui.diagnose import Diagnosis
from ddptui.diagnose.diagnosis import Cause
from ddptui.diagnose.signatures import is_harmless, own_cause
from ddptui.events import (
    Failure,
    Level,
    LineRun,
    LogLine,
    Metric,
    MetricRun,
    NodeState,
    NodeStatus,
    Source,
    StackCount,
    Stall,
    format_metric,
)
from ddptui.insight.judge import Told
from ddptui.live.follow import Batch
from ddptui.live.session import Session
from ddptui.metrics.bulk import made
from ddptui.nccl import nccl_warnings
from ddptui.outcome import INCOMPLETE_EXIT, RunResult
from ddptui.store.health import stall_texts
from ddptui.store.store import Store


def line_prefix(line: LogLine) -> str:
    if line.rank is not None:
        tag = f"r{line.rank}" if line.source is not Source.NCCL else f"r{line.rank} nccl"
    else:
        tag = {"agent": "agent", "nccl": "nccl", "ssh": "ddptui",
               "setup": "setup"}.get(str(line.source), "")
    return f"[{line.node} {tag}]"


def format_line(line: LogLine) -> str:
    return f"{line_prefix(line)} {line.text}"


def format_state(ev: NodeState) -> str:
    detail = f" ({ev.detail})" if ev.detail else ""
    return f"[{ev.node}] ── {ev.status}{detail}"


class Printer:
    """Every line as it comes; with the run's ``store``, what its curves tell (the store's one
    judge, :mod:`ddptui.insight`), each finding once, when found."""

    def __init__(self, out: TextIO = sys.stdout, *, metrics: bool = True,
                 store: Store | None = None) -> None:
        self.out = out
        self.metrics = metrics
        self.store = store
        self.told = 0  # findings said so far

    def __call__(self, batch: Batch) -> None:
        parts: list[str] = []
        stalls: list[Stall] = []  # said together: a whole-run stall is one line
        for ev in batch.events:
            if isinstance(ev, LogLine):
                parts.append(format_line(ev))
            elif type(ev) is LineRun:  # each line as format_line would print it
                tag = format_line(LogLine(ev.node, "", ev.time, rank=ev.rank))
                parts.append(tag + ev.text[:-1].replace("\n", "\n" + tag))
            elif isinstance(ev, NodeState):
                parts.append(format_state(ev))
            elif isinstance(ev, Metric) and self.metrics:
                parts.append(f"[{ev.node} r{ev.rank}] {format_metric(ev.kind, ev.step, ev.values)}")
            elif type(ev) is MetricRun and self.metrics:  # its points, made to be printed
                parts.extend(f"[{m.node} r{m.rank}] {format_metric(m.kind, m.step, m.values)}"
                             for m in made(ev))
            elif isinstance(ev, Failure):
                parts.append(format_failure_head(ev))
            elif isinstance(ev, Stall):
                stalls.append(ev)
        parts.extend(f"[{s.node} ddptui] {'⚠ ' if s.stalled or s.after_error else ''}{text}"
                     for s, text in stall_texts(stalls))
        if self.store is not None and any(type(ev) in (Metric, MetricRun, StackCount)
                                          for ev in batch.events):
            found = self.store.insight().findings
            parts.extend(f"[{f.node} ddptui] ⚠ {f.text}" for f in found[self.told:])
            self.told = len(found)
        if parts:
            self.out.write("\n".join(parts) + "\n")
            self.out.flush()


def format_failure_head(f: Failure) -> str:
    rank = f"rank {f.rank}" if f.rank is not None else "a rank"
    how = f"exit code {f.exit_code}" if f.exit_code is not None else "no exit code"
    if f.signal:
        how += f" ({f.signal})"
    cause = own_cause(f.root_cause)
    if cause:
        how += f": {cause}"
    return f"[{f.node}] ✗ {rank} failed: {how}"


def last_words(lines: list[LogLine], count: int) -> list[LogLine]:
    """A rank's last ``count`` lines that may explain its end: not its DEBUG chatter, and
    not the warnings known to be harmless (c10d's "hostname of the client socket cannot be
    retrieved"), unless there is nothing else."""
    said = [ln for ln in lines if ln.level is not Level.DEBUG]
    return ([ln for ln in said if not is_harmless(ln.text)] or said)[-count:]


def diagnosis_report(d: Diagnosis) -> list[str]:
    """The diagnosis first: ddptui's sentence, the lines it rests on, then node by node."""
    return d.report("ddptui: ")


def failure_report(store: Store, result: RunResult, tail: int = 15, run_id: str = "") -> str:
    """Why the run failed, for a person: the diagnosis, then which node, which rank, how,
    and its last lines."""
    out: list[str] = [] if result.diagnosis is None else diagnosis_report(result.diagnosis)
    failures = result.failures
    if failures:
        seen: set[tuple[str, int | None]] = set()
        for f in failures:
            if (f.node, f.rank) in seen:
                continue
            seen.add((f.node, f.rank))
            out.append(f"ddptui: node {f.node}, {format_failure_head(f).split('] ✗ ', 1)[1]}")
            if f.error_file:
                out.append(f"  error file on {f.node}: {f.error_file}")
            if f.rank is not None:  # what the rank said, not its metric records
                lines = last_words(store.rank_tail(f.rank, 50 * tail), tail)
                if lines:
                    out.append(f"  last lines of rank {f.rank}:")
                    out.extend(f"    {ln.text}" for ln in lines)
    views = {n.name: n for n in store.node_views()}
    stopped = {name for name, v in views.items() if v.status is NodeStatus.STOPPED}
    # a node given up because Slurm ended the job holds nothing more: it is not "lost"
    said_how = {NodeStatus.FAILED} | ({NodeStatus.LOST} if result.diagnosis is not None and
                                      result.diagnosis.cause is Cause.SLURM_JOB_ENDED else set())
    for node, code in result.node_exit_codes.items():
        if code not in (0, None) and not any(f.node == node for f in failures):
            out.append(f"ddptui: node {node} exited with code {code}")
        elif code is None and node in views and views[node].status in said_how:
            out.append(f"ddptui: node {node}: {views[node].detail}")  # ended, and said how
        elif code is None and not result.stopped and node not in stopped:
            again = f" `ddptui attach {run_id}` follows it again." if run_id else ""
            out.append(f"ddptui: node {node} was lost: no exit code could be read; its job may "
                       f"still be running.{again}")
    return "\n".join(out)


def run_headless(session: Session, out: TextIO = sys.stdout) -> int:
    """Follow a launched or attached session to its end; Ctrl-C stops the run cleanly."""
    try:
        result = None
        while result is None:
            result = session.wait(0.5)
    except KeyboardInterrupt:
        out.write(f"\nddptui: stopping run {session.run_id} (Ctrl-C again to kill at once)\n")
        out.flush()
        try:
            report = session.stop()
        except KeyboardInterrupt:
            report = session.stop(grace=0)
        result = session.wait(30)
        for node, facts in report.checked.items():
            out.write(f"ddptui: node {node} checked after the stop: {'; '.join(facts)}\n")
        if not report.clean:
            for node, err in report.errors.items():
                out.write(f"ddptui: could not stop node {node}: {err}\n")
            for node, pids in report.leftover.items():
                if pids:
                    out.write(f"ddptui: node {node} still has processes {pids}\n")
            return 1
    if result is None:
        return 1
    if result.exit_code != 0 and not result.stopped:
        out.write(failure_report(session.store, result, run_id=session.run_id) + "\n")
    out.write(nccl_report(session))
    out.write(insight_report(session.store.insight(final=True)))
    code = result.exit_code
    if result.problem:  # ddptui's own trouble here: say it last, where a person looks
        out.write(f"ddptui: this run's record here is incomplete: {result.problem}\n")
        code = INCOMPLETE_EXIT if code == 0 else code
    out.write(f"ddptui: run {session.run_id} {session.store.run_info().status}, exit code {code}\n")
    out.flush()
    await_reaper(session, out)
    return code


def insight_report(told: Told) -> str:
    """What the curves told over the whole run, after it: every finding and what could not
    be judged (``ddptui logs RUN`` says the same of a past run)."""
    if not told.summary:
        return ""
    return "".join(f"ddptui: {line}\n" for line in ("what the curves tell:", *told.summary))


#: At most this many NCCL warnings in the summary; ``ddptui nccl`` has them all.
NCCL_WARNINGS_SHOWN = 5


def nccl_report(session: Session) -> str:
    """What looked wrong in NCCL's choices (a job on TCP beside InfiniBand, a loopback
    interface, ...), failed run or not: a run that worked may still have been slow for it."""
    warnings = nccl_warnings(session.nccl_facts())
    if not warnings:
        return ""
    lines = [f"ddptui: NCCL: {w.text}" for w in warnings[:NCCL_WARNINGS_SHOWN]]
    more = len(warnings) - NCCL_WARNINGS_SHOWN
    lines.append(f"ddptui: {f'{more} more NCCL warning(s); ' if more > 0 else ''}"
                 f"`ddptui nccl {session.run_id}` shows what NCCL chose on each node")
    return "\n".join(lines) + "\n"


def await_reaper(session: Session, out: TextIO) -> None:
    """Wait (bounded) while ddptui seeks lost nodes to stop what the run left there, so that
    a node that comes back soon holds nothing of it (see :mod:`ddptui.live.liveness`)."""
    reaper = session.reaper
    if reaper is None:
        return
    names = ", ".join(reaper.pending)
    if reaper.is_alive():
        out.write(f"ddptui: trying for up to {reaper.seconds:g} s to reach {names} and stop "
                  "what the run left there (Ctrl-C leaves it)\n")
        out.flush()
        try:
            reaper.join(reaper.seconds + session.config.job.stop_grace + 90)
        except KeyboardInterrupt:
            reaper.cancel.set()
            out.write(f"ddptui: {names} left as they are; `ddptui stop {session.run_id}` stops "
                      "what runs there once they answer\n")
            return
    for node, what in reaper.report.items():
        out.write(f"ddptui: node {node}: {what}\n")
    out.flush()
