"""A run's events regrouped per node and per rank, the shape every rule reads.

Built in one pass so the rules stay small and order-free: each asks "what did rank 3 say,
how did it end, how far did it get" instead of walking the event list again.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from ddptui.diagnose import signatures as sig
from ddptui.events import (
    Event,
    Failure,
    LineRun,
    LogLine,
    Metric,
    MetricRun,
    NodeState,
    NodeStatus,
    Source,
    StackCount,
    Stall,
)
from ddptui.metrics.bulk import made
from ddptui.telemetry.sample import NodeSample

# The fields of torchrun's failure blocks ("Failures:" and "Root Cause"), read here for every
# rank: the parser's Failure event carries the root cause only, and the others' signals
# (SIGTERM: torchrun stopped them) are what tells a consequence from a cause.
_RANK_FIELD = re.compile(r"^\s*rank\s*: (\d+) \(local_rank: (\d+)\)")
_EXIT_FIELD = re.compile(r"^\s*exitcode\s*: (-?\d+)(?: \(pid: (\d+)\))?")
_CHILD_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)(?: \(pid: (\d+)\))?")
# The node's tee saying a rank ended with exit code 0 (torchrun logs failures only): see
# ddptui.nodeprog.torchrun_tee.CLEAN_EXIT.
_CLEAN_EXIT = re.compile(r"^ddptui: rank (\d+) \(local_rank \d+, pid (\d+)\) exited with code 0$")
# The agent stopping a worker itself, by pid: a SIGKILL it sent is no out-of-memory kill.
_SIGNALLED = re.compile(r"process (\d+) (?:closing signal|via signal)|shutdown process (\d+)")
# Shells report a signal death as 128 + the signal.
_SHELL_SIGNAL = {137: signal.SIGKILL, 139: signal.SIGSEGV, 134: signal.SIGABRT,
                 143: signal.SIGTERM}


def signal_of(exit_code: int | None) -> str | None:
    """``SIGKILL`` for -9 (torch's way) or 137 (a shell's), None for a plain exit."""
    if exit_code is None:
        return None
    if exit_code in _SHELL_SIGNAL:
        return _SHELL_SIGNAL[exit_code].name
    if exit_code < 0:
        try:
            return signal.Signals(-exit_code).name
        except ValueError:
            return f"signal {-exit_code}"
    return None


def said(line: LogLine) -> str:
    """A rank's line without torch's ``[rankN]:`` in front."""
    return sig.RANK_PREFIX.sub("", line.text, count=1).strip()


@dataclass(slots=True)
class RankFacts:
    node: str
    rank: int
    lines: list[LogLine] = field(default_factory=list)
    last_step: int | float | None = None
    last_step_time: float | None = None
    exit_code: int | None = None
    exit_time: float | None = None
    pid: int | None = None
    left_at: float | None = None  # when its node said it ended with exit code 0

    @property
    def signal(self) -> str | None:
        return signal_of(self.exit_code)

    @property
    def last_time(self) -> float | None:
        return self.lines[-1].time if self.lines else self.last_step_time

    def stopped_by_agent(self, node: NodeFacts) -> bool:
        """torchrun itself signalled this rank (it stops the others once one fails)."""
        return self.pid is not None and self.pid in node.signalled

    def traceback(self) -> bool:
        return any("Traceback (most recent call last)" in ln.text for ln in self.lines)


@dataclass(slots=True)
class NodeFacts:
    node: str
    agent: list[LogLine] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    status: NodeStatus | None = None
    exit_code: int | None = None
    status_time: float | None = None
    stopping_at: float | None = None
    signalled: set[int] = field(default_factory=set)
    attempts: int = 0
    seen: bool = False  # any line or state after pending: its agent was reached

    @property
    def joined(self) -> bool:
        """Its torchrun agent got as far as the rendezvous."""
        return any(sig.RDZV_JOINING in ln.text or sig.RDZV_TIMEOUT.search(ln.text)
                   for ln in self.agent)


@dataclass(slots=True)
class RunFacts:
    nodes: dict[str, NodeFacts]
    # By node and rank: after an elastic restart a global rank may live on another node.
    ranks: dict[tuple[str, int], RankFacts]

    def node_ranks(self, node: str) -> list[RankFacts]:
        return [r for r in self.ranks.values() if r.node == node]

    def rank(self, node: str, rank: int) -> RankFacts:
        return self.ranks.setdefault((node, rank), RankFacts(node, rank))


def gather(events: Iterable[Event], nodes: Sequence[str] = ()) -> RunFacts:
    """Group events; a node's earlier attempts are dropped (an elastic restart retried them)."""
    evs = list(_read(events))
    last_attempt: dict[str, int] = {}
    for ev in evs:
        if not isinstance(ev, Failure):
            last_attempt[ev.node] = max(last_attempt.get(ev.node, 0), ev.attempt)
    facts = RunFacts({n: NodeFacts(n) for n in nodes}, {})
    for ev in evs:
        node = facts.nodes.setdefault(ev.node, NodeFacts(ev.node))
        node.attempts = last_attempt.get(ev.node, 0)
        if isinstance(ev, NodeState):
            _state(node, ev)
        elif isinstance(ev, Failure):
            node.failures.append(ev)
        elif ev.attempt < last_attempt.get(ev.node, 0):
            continue
        elif isinstance(ev, Metric):
            rf = facts.rank(ev.node, ev.rank)
            if ev.step is not None and (rf.last_step is None or ev.step >= rf.last_step):
                rf.last_step, rf.last_step_time = ev.step, ev.time
        elif ev.rank is not None and ev.source in (Source.WORKER, Source.NCCL):
            facts.rank(ev.node, ev.rank).lines.append(ev)
            node.seen = True
        else:
            node.agent.append(ev)
            node.seen = node.seen or ev.source is not Source.SSH
            if node.stopping_at is None and sig.AGENT_STOPPING.search(ev.text):
                node.stopping_at = ev.time
            m = _SIGNALLED.search(ev.text)
            if m is not None:
                node.signalled.add(int(m.group(1) or m.group(2)))
    for node in facts.nodes.values():
        _exits(facts, node)
    return facts


def _read(events: Iterable[Event]) -> Iterator[NodeState | LogLine | Metric | Failure]:
    """The events as the rules read them: a run of lines or of metric lines as its lines or
    points (the rules read lines and steps, not how they travelled); telemetry samples,
    sampled stacks' counts and ddptui's own stall marks are no evidence, and carry no attempt
    to sort them by."""
    for ev in events:
        if isinstance(ev, MetricRun):
            yield from made(ev)
        elif isinstance(ev, LineRun):
            yield from ev.lines()
        elif not isinstance(ev, Stall | NodeSample | StackCount):
            yield ev


def _state(node: NodeFacts, ev: NodeState) -> None:
    node.status, node.status_time = ev.status, ev.time
    if ev.exit_code is not None:
        node.exit_code = ev.exit_code
    if ev.status not in (NodeStatus.PENDING, NodeStatus.CONNECTING):
        node.seen = True


def _exits(facts: RunFacts, node: NodeFacts) -> None:
    """Each rank's exit code, from the agent's `failed (exitcode...)` line and its blocks."""
    local_to_global = {ln.local_rank: ln.rank for r in facts.node_ranks(node.node)
                       for ln in r.lines[:1]}
    rank: int | None = None
    for ln in node.agent:
        m = _CLEAN_EXIT.match(ln.text)
        if m is not None:
            _set_exit(facts, node.node, int(m.group(1)), 0, ln.time, m.group(2))
            facts.rank(node.node, int(m.group(1))).left_at = ln.time
            continue
        m = _CHILD_FAILED.search(ln.text)
        if m is not None:
            g = local_to_global.get(int(m.group(2)))
            if g is not None:
                _set_exit(facts, node.node, g, int(m.group(1)), ln.time, m.group(3))
            continue
        m = _RANK_FIELD.match(ln.text)
        if m is not None:
            rank = int(m.group(1))
            continue
        m = _EXIT_FIELD.match(ln.text)
        if m is not None and rank is not None:
            _set_exit(facts, node.node, rank, int(m.group(1)), ln.time, m.group(2))
            rank = None
    for f in node.failures:
        if f.rank is not None and f.exit_code is not None:
            _set_exit(facts, node.node, f.rank, f.exit_code, f.time)


def _set_exit(facts: RunFacts, node: str, rank: int, code: int, time: float,
              pid: str | None = None) -> None:
    rf = facts.rank(node, rank)
    if rf.exit_code is None:
        rf.exit_code, rf.exit_time = code, time
    if rf.pid is None and pid is not None:
        rf.pid = int(pid)
