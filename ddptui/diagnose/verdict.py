"""From the rules' findings to the run's one diagnosis.

The headline is the most telling finding (a cause before a wait before a consequence), and
among equals the earliest: once one rank fails, the others fail because of it, later.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ddptui.diagnose.diagnosis import Cause, Diagnosis
from ddptui.diagnose.facts import RunFacts, gather
from ddptui.diagnose.finding import Finding, Key, where
from ddptui.diagnose.rules import RULES
from ddptui.diagnose.stalls import collective_timeout
from ddptui.events import Event, NodeStatus

_MAX_EVIDENCE = 8


def diagnose(
    events: Iterable[Event],
    *,
    nodes: Sequence[str] = (),
    world_size: int | None = None,
    exit_code: int | None = None,
) -> Diagnosis | None:
    """Why the run failed, or None when it did not (or nothing says it did).

    Args:
        events: everything the run's nodes produced, in arrival order (any mix of nodes).
        nodes: the hosts file's node names, in order: a node that sent nothing is one that
            never joined the rendezvous.
        world_size: the number of ranks, when known: a rank that never printed a line can
            still be the one a collective waited for.
        exit_code: the run's own exit code; 0 means there is nothing to diagnose.
    """
    if exit_code == 0:
        return None
    facts = gather(events, nodes)
    if facts.nodes and all(n.status is NodeStatus.EXITED and n.exit_code == 0
                           for n in facts.nodes.values()):
        return None
    findings = find(facts, world_size)
    if not findings:
        return None
    head = min(findings, key=lambda f: (f.tier, f.time, findings.index(f)))
    return Diagnosis(
        head.cause,
        f"{head.what}. What to do: {head.advice}.",
        head.what,
        head.advice,
        head.node,
        head.rank,
        head.time,
        head.evidence[:_MAX_EVIDENCE],
        details(facts, head, findings),
    )


def find(facts: RunFacts, world_size: int | None = None) -> list[Finding]:
    """Every rule's findings, in rule order; a rank explained once is not explained again."""
    claimed: set[Key] = set()
    out: list[Finding] = []
    for rule in RULES:
        if rule is collective_timeout:
            found = collective_timeout(facts, claimed, world_size)
        else:
            found = rule(facts, claimed)
        for f in found:
            claimed.add((f.node or "", f.rank))
            claimed |= f.explains
        out.extend(found)
    return out


def details(facts: RunFacts, head: Finding, findings: list[Finding]) -> dict[str, list[str]]:
    """Per node, what happened there, each failure marked as the cause or a consequence."""
    out: dict[str, list[str]] = {n: [] for n in facts.nodes}
    said: set[Key] = set()
    gone = "left" if head.cause is Cause.EARLY_EXIT else "failed"
    for f in sorted(findings, key=lambda f: f.time):
        if f.node is None:
            continue
        if f is head:
            out[f.node].append(f"{f.what} (the cause)")
        else:
            out[f.node].append(f"{f.what}: after {where(head.node, head.rank)} {gone}, "
                               "most likely a consequence")
        said.add((f.node, f.rank))
        said |= f.explains
    for rf in facts.ranks.values():
        if (rf.node, rf.rank) not in said and rf.signal == "SIGTERM":
            out[rf.node].append(f"rank {rf.rank} was stopped by torchrun (SIGTERM) once "
                                "another rank had failed")
    for name, node in facts.nodes.items():
        if node.attempts:
            out[name].append(f"torchrun restarted its workers {node.attempts} time(s) first")
        if not node.seen:
            out[name].append("sent nothing: its torchrun never started or was never reached")
        elif node.status is not None and node.status.finished:
            code = f" (exit code {node.exit_code})" if node.exit_code is not None else ""
            out[name].append(f"ended {node.status}{code}")
    return {n: lines for n, lines in out.items() if lines}
