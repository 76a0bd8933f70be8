"""Ranks that disagree about the collectives they run: one left while the others trained on,
or they called different collectives at the same point.

Both end with every other rank failing in a collective (a peer lost, a timeout), and the
first of those failures says nothing of the rank that caused it: the rule that sees the
disagreement names that rank instead, and leaves the others' failures to be listed as its
consequences.
"""

from __future__ import annotations

from ddptui.diagnose import signatures as sig
from ddptui.diagnose.diagnosis import Cause
from ddptui.diagnose.facts import RankFacts, RunFacts
from ddptui.diagnose.finding import (
    Finding,
    Key,
    cite,
    first_said,
    last_lines,
    open_ranks,
    where,
)

_UNEVEN = ("give every rank the same number of batches (DistributedSampler(drop_last=True), "
           "or pad the shorter shards); where inputs cannot be evened, wrap the training loop "
           "in torch.distributed.algorithms.Join (`with Join([model]):`)")


def _collective_failure(rf: RankFacts) -> str | None:
    """The rank's first line saying a collective failed for want of a peer."""
    line = first_said(rf, lambda t: sig.PEER_LOST.search(t) or sig.GLOO_TIMEOUT.search(t)
                      or sig.NCCL_WATCHDOG.search(t) or sig.NCCL_HEARTBEAT in t)
    return cite(line) if line is not None else None


def early_exit(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    """A rank that ended with exit code 0 while others still ran, whose next collective then
    failed: its data ran out first (uneven inputs across ranks).

    Its time is when it was last heard (its last line or step), not when its node said it
    ended: that line comes on the agent's next poll, often after the others' failures.
    """
    hurt = {(rf.node, rf.rank): why for rf in facts.ranks.values()
            if (why := _collective_failure(rf)) is not None}
    out = []
    for rf in open_ranks(facts, claimed):
        node = facts.nodes.get(rf.node)
        if rf.left_at is None or node is None or rf.stopped_by_agent(node):
            continue
        others = sorted(r for (n, r) in hurt if (n, r) != (rf.node, rf.rank))
        if not others:
            continue
        step = f" at step {rf.last_step}" if rf.last_step is not None else ""
        plural = "s" if len(others) > 1 else ""
        what = (f"{where(rf.node, rf.rank)} left the run first: it ended with exit code "
                f"0{step} while the other ranks still trained, so their next collective had "
                f"no partner (rank{plural} {', '.join(map(str, others))} failed in it)")
        evidence = [f"last line of rank {rf.rank}: {cite(ln)}" for ln in last_lines(rf, 1)]
        evidence += [cite(ln) for ln in node.agent if ln.time == rf.left_at
                     and f"rank {rf.rank} (" in ln.text][:1]
        evidence += [hurt[(n, r)] for (n, r) in sorted(hurt, key=lambda k: k[1])
                     if r != rf.rank][:2]
        heard = min(t for t in (rf.last_time, rf.left_at) if t is not None)
        out.append(Finding(Cause.EARLY_EXIT, rf.node, rf.rank, heard, what, _UNEVEN, evidence))
    return out


def _shape(op: str, shape: str | None) -> str:
    return f"{op} of shape [{shape}]" if shape is not None else op


def mismatch(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL's report that ranks called different collectives (or
    the same with other shapes) at one point: one finding for the run, naming both."""
    seen = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.COLLECTIVE_MISMATCH.search)
        if line is not None:
            seen.append((line.time, rf, line))
    if not seen:
        return []
    time, rf, line = min(seen, key=lambda s: s[0])
    m = sig.COLLECTIVE_MISMATCH.search(line.text)
    assert m is not None
    me, seq, op, shape, other, _, op2, shape2 = m.groups()
    at = f" at collective #{seq}" if seq is not None else ""
    if op == op2:
        what = (f"ranks {me} and {other} called {op} with different tensors{at}: "
                f"shape [{shape}] on rank {me}, [{shape2}] on rank {other}")
    else:
        what = (f"ranks {me} and {other} called different collectives{at}: "
                f"{_shape(op, shape)} on rank {me}, {_shape(op2, shape2)} on rank {other}")
    what += "; TORCH_DISTRIBUTED_DEBUG=DETAIL stopped them before they could hang"
    f = Finding(Cause.COLLECTIVE_MISMATCH, rf.node, rf.rank, time, what,
                f"make every rank call the same collectives in the same order with the same "
                f"shapes: look for a collective under a rank-dependent `if` (rank {me} or "
                f"{other}) or a tensor whose size depends on the rank's data",
                [cite(ln) for _, _, ln in sorted(seen, key=lambda s: s[0])][:2])
    f.explains = {(r.node, r.rank) for _, r, _ in seen}
    return [f]
