"""What the dashboard says in toasts and questions, as pure functions of what happened.

No Textual widget and no clock here: each text is tested from plain values
(tests/test_tui_pure.py), and the screen or the app only shows the :class:`Notice`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from textual.notifications import SeverityLevel

from ddptui.diagnose.signatures import own_cause
from ddptui.events import Failure, NodeStatus, Stall
from ddptui.outcome import RunResult, StopReport
from ddptui.store.health import stall_texts
from ddptui.store.views import NodeView


@dataclass(frozen=True, slots=True)
class Notice:
    """A toast to show: its text, title, severity and how long it stays (None: Textual's
    default)."""

    message: str
    title: str = ""
    severity: SeverityLevel = "information"
    timeout: float | None = None


def failure_notice(failure: Failure) -> Notice:
    """A rank that failed, with its exit code, signal and root cause."""
    who = f"rank {failure.rank}" if failure.rank is not None else "a rank"
    how = f"exit code {failure.exit_code}" if failure.exit_code is not None else "failed"
    if failure.signal:
        how += f" ({failure.signal})"
    # The run's diagnosis, when it ends, says what torch's boilerplate did not.
    cause = own_cause(failure.root_cause) or "no root cause reported"
    return Notice(f"{failure.node}: {who} failed, {how}: {cause}", "Node failed", "error", 15)


def node_change_notices(nodes: Iterable[NodeView], seen: Mapping[str, NodeStatus],
                        failed_nodes: set[str]) -> list[Notice]:
    """Nodes whose status changed since ``seen``: one that failed or was lost (unless a rank
    failure of it was told already, which says more), or one restarting its workers."""
    notices = []
    for node in nodes:
        if seen.get(node.name) == node.status:
            continue
        if node.status in (NodeStatus.FAILED, NodeStatus.LOST) and node.name not in failed_nodes:
            code = "" if node.exit_code is None else f" with exit code {node.exit_code}"
            detail = f": {node.detail}" if node.detail else ""
            notices.append(Notice(f"{node.name} {node.status}{code}{detail}", "Node failed",
                                  "error", 15))
        elif node.status is NodeStatus.RESTARTING:
            notices.append(Notice(
                f"{node.name} restarting the workers (attempt {node.attempt}). {node.detail}",
                "Restart", "warning"))
    return notices


def stall_notices(stalls: Sequence[Stall]) -> list[Notice]:
    """Ranks that stalled, went on again, or fell silent after an error, in the headless
    output's words; ``k`` shows their stacks."""
    notices = []
    for s, text in stall_texts(stalls):
        if s.after_error:
            notices.append(Notice(text, "Silent after an error", "warning", 30))
        elif not s.stalled:
            notices.append(Notice(text, "Rank going again"))
        elif s.whole_run:
            notices.append(Notice(f"{text}. Press k for the ranks' Python stacks.",
                                  "The run stalled", "warning", 30))
        else:
            notices.append(Notice(f"{text}. Press k for its Python stack.", "Rank stalled",
                                  "warning", 30))
    return notices


def finished_notice(run_id: str, result: RunResult | None) -> Notice | None:
    """The run ended by itself: its exit code (None when the handle knows no result) and, for
    a failed run, ddptui's diagnosis (what happened, where, what to do) with the line it rests
    on."""
    if result is None:
        return None
    code = result.exit_code
    d = result.diagnosis
    if d is not None:
        evidence = f"\n{d.evidence[0]}" if d.evidence else ""
        return Notice(d.headline + evidence, f"Run {run_id} failed (exit code {code})",
                      "error", 30)
    return Notice(f"Run {run_id} finished with exit code {code}.",
                  severity="information" if code == 0 else "error")


def stop_report_notice(run_id: str, report: StopReport) -> Notice:
    """What a stop left: nothing, or the process ids still alive per node."""
    left = {node: pids for node, pids in report.leftover.items() if pids}
    if not left:
        # what a scheduler's transport checked besides (a Slurm step, torchrun's temp dirs)
        facts = sorted({f.replace(f" on {node}", "") for node, found in report.checked.items()
                        for f in found if not f.startswith("no process")})
        also = f" Checked after the stop: {'; '.join(facts)}." if facts else ""
        return Notice(f"Run {run_id} stopped; no process of it is left.{also}", "Stopped")
    where = "; ".join(f"{node}: {', '.join(map(str, pids))}" for node, pids in left.items())
    return Notice(f"Processes still alive after stop: {where}", "Stop incomplete", "error", 30)


def stop_question(verb: str, run_id: str, processes: int, nodes: int) -> str:
    """``verb`` is Stop or Restart: the question before ending the run's processes."""
    procs = "process" if processes == 1 else "processes"
    where = "node" if nodes == 1 else "nodes"
    return f"{verb} run {run_id}? This ends {processes} {procs} on {nodes} {where}."


def quit_question(run_id: str, processes: int, nodes: int) -> str:
    """Quitting while the run goes on: stop it, or leave it to attach again later."""
    return (f"Run {run_id} is still going ({processes} processes on {nodes} nodes). "
            f"Stop it, or leave it running and reattach later with `ddptui attach {run_id}`?")
