"""Ranks that disagree about the collectives they run: one left while the others trained on,
or they called different collectives at the same point.

A mismatch is told from what the ranks print anyway, whichever the run has:
TORCH_DISTRIBUTED_DEBUG=DETAIL's report (both ranks and both collectives, before any hangs),
NCCL's watchdog lines compared across ranks (another op or element count at one sequence
number: NCCL itself never compares them, so every rank waits out its timeout) and gloo's
size check on a message it received (the rank aborts with SIGABRT, which must not read as a
crash of its own).

Both end with every other rank failing in a collective (a peer lost, a timeout), and the
first of those failures says nothing of the rank that caused it: the rule that sees the
disagreement names that rank instead, and leaves the others' failures to be listed as its
consequences.
"""

from __future__ import annotations

from collections.abc import Callable

from ddptui.diagnose import signatures as sig
from ddptui.diagnose.diagnosis import Cause
from ddptui.diagnose.facts import RankFacts, RunFacts
from ddptui.diagnose.finding import (
    Finding,
    Key,
    cite,
    exit_evidence,
    first_said,
    last_lines,
    open_ranks,
    where,
)
from ddptui.events import LogLine

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


def mismatch(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    """Ranks that called different collectives at one point (or the same with other sizes):
    one finding for the run, from the most telling evidence there is."""
    judges: tuple[Callable[[RunFacts, set[Key]], Finding | None], ...] = (
        _detail, _nccl_watchdogs, _gloo_size)
    for judge in judges:
        found = judge(facts, claimed)
        if found is not None:
            return [found]
    return []


def _look_for(ranks: str) -> str:
    """The same advice whichever evidence told the mismatch: the usual causes in user code."""
    return ("make every rank call the same collectives in the same order with the same sizes; "
            f"look at what {ranks} ran at that point for a collective under a rank-dependent "
            "branch (`if rank == ...`), a tensor sized by the rank's own data (an uneven last "
            "batch, a list of another length) or a model that differs on one rank (another "
            "config, a layer built conditionally, parameters not all requiring grad)")


def _shape(op: str, shape: str | None) -> str:
    return f"{op} of shape [{shape}]" if shape is not None else op


def _detail(facts: RunFacts, claimed: set[Key]) -> Finding | None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL's report, which names both ranks and both collectives."""
    seen = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.COLLECTIVE_MISMATCH.search)
        if line is not None:
            seen.append((line.time, rf, line))
    if not seen:
        return None
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
                _look_for(f"ranks {me} and {other}"),
                [cite(ln) for _, _, ln in sorted(seen, key=lambda s: s[0])][:2])
    f.explains = {(r.node, r.rank) for _, r, _ in seen}
    return f


#: What a rank's watchdog says it was running: the op and its element count (None where
#: the release does not print it).
Work = tuple[str, int | None]


def _works(facts: RunFacts, claimed: set[Key]
           ) -> dict[int, list[tuple[RankFacts, LogLine, Work]]]:
    """Each rank's first timed-out NCCL collective, by sequence number."""
    out: dict[int, list[tuple[RankFacts, LogLine, Work]]] = {}
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.NCCL_WATCHDOG.search)
        m = sig.NCCL_WORK.search(line.text) if line is not None else None
        if line is None or m is None:
            continue
        numel = int(m.group(3)) if m.group(3) is not None else None
        out.setdefault(int(m.group(1)), []).append((rf, line, (m.group(2), numel)))
    return out


def _work_text(work: Work) -> str:
    op, numel = work
    if numel is None:
        return op
    return f"{op} of {numel} element{'s' if numel != 1 else ''}"


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {', '.join(map(str, ranks[:-1]))} and {ranks[-1]}"


def odd_one(groups: dict[Work, list[int]]) -> int | None:
    """The one rank whose collective differs from what every other rank ran, if there is
    such a rank (with two ranks, or three ways, either side may be the odd one)."""
    if len(groups) != 2:
        return None
    small, big = sorted(groups.values(), key=len)
    return small[0] if len(small) == 1 and len(big) >= 2 else None


def _nccl_watchdogs(facts: RunFacts, claimed: set[Key]) -> Finding | None:
    """Ranks whose watchdogs timed out in the same collective by number but not by op or
    size. NCCL never compares them, so each rank waits for data that never comes."""
    for seq, seen in sorted(_works(facts, claimed).items()):
        if any(numel is None for _, _, (_, numel) in seen):
            seen = [(rf, ln, (op, None)) for rf, ln, (op, _) in seen]
        groups: dict[Work, list[int]] = {}
        for rf, _, work in sorted(seen, key=lambda s: s[0].rank):
            groups.setdefault(work, []).append(rf.rank)
        if len(groups) < 2:
            continue
        first = min(seen, key=lambda s: (s[1].time, s[0].rank))
        odd = odd_one(groups)
        if odd is not None:
            work = next(w for w, rs in groups.items() if rs == [odd])
            other, rest = next((w, rs) for w, rs in groups.items() if w != work)
            rf = next(r for r, _, _ in seen if r.rank == odd)
            said = (f"{where(rf.node, odd)} ran {_work_text(work)} while "
                    f"{_ranks_text(rest)} ran {_work_text(other)}")
            who = f"rank {odd}"
        else:
            rf = first[0]
            said = "; ".join(f"{_work_text(w)} on {_ranks_text(rs)}" for w, rs in groups.items())
            who = "each of these ranks"
        m = sig.NCCL_WORK.search(first[1].text)
        limit = f" ({int(m.group(5)) / 1000:g} s)" if m is not None and m.group(5) else ""
        what = (f"collective mismatch at NCCL collective #{seq}: {said}; "
                f"NCCL does not check that they agree, so they waited until torch's watchdog "
                f"timed out{limit}")
        shown = sorted(seen, key=lambda s: (s[0].rank != odd, s[0].rank))
        return Finding(Cause.COLLECTIVE_MISMATCH, rf.node, rf.rank, first[1].time, what,
                       _look_for(who), [cite(ln) for _, ln, _ in shown][:4],
                       explains={(r.node, r.rank) for r, _, _ in seen})
    return None


def _gloo_size(facts: RunFacts, claimed: set[Key]) -> Finding | None:
    """gloo's check that a message fits what the receiving rank's collective expects. Its line
    names neither the sender nor the tensors: the rank that aborted is the one named, and its
    sizes are bytes of one message (a piece of each tensor), not the tensors' sizes. The check
    fails only when the message is the larger (``sent <= expected`` is what it enforces)."""
    seen = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.GLOO_SIZE.search)
        if line is not None:
            seen.append((line, rf))
    if not seen:
        return None
    seen.sort(key=lambda s: s[0].time)
    line, rf = seen[0]
    m = sig.GLOO_SIZE.search(line.text)
    assert m is not None
    sent, expected = int(m.group(1)), int(m.group(2))
    how = f" ({rf.signal})" if rf.signal is not None else ""
    also = "".join(f", and {where(r.node, r.rank)} too" for _, r in seen[1:])
    what = (f"collective mismatch between ranks: {where(rf.node, rf.rank)} received "
            f"{sent} bytes from another rank where its own collective expected {expected}, and "
            f"gloo's size check aborted it{how}{also}; another rank had called a different "
            "collective, or the same one with a larger tensor (gloo counts the bytes of one "
            "message, a piece of each tensor, and does not name the rank that sent it)")
    evidence = [cite(ln) for ln, _ in seen][:3] + exit_evidence(facts, rf)
    return Finding(Cause.COLLECTIVE_MISMATCH, rf.node, rf.rank, line.time, what,
                   _look_for("each rank"), evidence,
                   explains={(r.node, r.rank) for _, r in seen})
