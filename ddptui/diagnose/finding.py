"""One rule's answer, and the small helpers every rule words its answer with."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum

from ddptui.diagnose import signatures as sig
from ddptui.diagnose.diagnosis import Cause
from ddptui.diagnose.facts import RankFacts, RunFacts, said
from ddptui.events import LogLine


class Tier(IntEnum):
    """How much a finding explains: a cause beats a wait, a wait beats a consequence.

    Time orders findings only within a tier: a rank that lost its peer often says so before
    torchrun even logs the peer's SIGKILL, and must not become the headline for it.
    """

    CAUSE = 0
    WAIT = 1
    CONSEQUENCE = 2


Key = tuple[str, int | None]


@dataclass(slots=True)
class Finding:
    cause: Cause
    node: str | None
    rank: int | None
    time: float
    what: str
    advice: str
    evidence: list[str] = field(default_factory=list)
    tier: Tier = Tier.CAUSE
    explains: set[Key] = field(default_factory=set)  # other ranks it accounts for


#: A rule reads the facts and the ranks earlier rules explained, and says what it found.
Rule = Callable[[RunFacts, set[Key]], list[Finding]]


def cite(line: LogLine) -> str:
    """A line as evidence: verbatim, after where it came from."""
    who = f"r{line.rank}" if line.rank is not None else str(line.source)
    return f"[{line.node} {who}] {line.text}"


def where(node: str | None, rank: int | None) -> str:
    if rank is None:
        return f"node {node}"
    return f"rank {rank} (node {node})" if node is not None else f"rank {rank}"


def open_ranks(facts: RunFacts, claimed: set[Key]) -> Iterator[RankFacts]:
    for rf in facts.ranks.values():
        if (rf.node, rf.rank) not in claimed:
            yield rf


def first_said(rf: RankFacts, test: Callable[[str], object]) -> LogLine | None:
    """The rank's first line whose own words pass ``test``."""
    for ln in rf.lines:
        if test(said(ln)):
            return ln
    return None


def last_lines(rf: RankFacts, count: int) -> list[LogLine]:
    """The rank's last ``count`` lines that may explain something: known harmless warnings
    (c10d's "hostname of the client socket cannot be retrieved") are passed over."""
    return [ln for ln in rf.lines if not sig.is_harmless(ln.text)][-count:] if count else []


def after(rf: RankFacts, line: LogLine, count: int) -> list[LogLine]:
    """The ``count`` lines the rank wrote after ``line``: a message's continuation."""
    for i, ln in enumerate(rf.lines):
        if ln is line:
            return rf.lines[i + 1:i + 1 + count]
    return []


def exit_evidence(facts: RunFacts, rf: RankFacts) -> list[str]:
    """The agent's lines about how this rank ended (its exit code, the signal)."""
    node = facts.nodes.get(rf.node)
    if node is None:
        return []
    marks = [f"local_rank: {ln.local_rank} " for ln in rf.lines[:1] if ln.local_rank is not None]
    if rf.pid is not None:
        marks += [f"(pid: {rf.pid})", f"PID {rf.pid}"]
    return [cite(ln) for ln in node.agent
            if any(m in ln.text for m in marks) and "closing signal" not in ln.text][:2]
