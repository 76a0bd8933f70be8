"""A collective that timed out, turned into the rank the others were waiting for.

The ranks that report the timeout are the ones that kept going; the one at fault is usually
silent. Progress says who it is when every rank prints it (the lowest last step); when only
rank 0 prints, the rank that never reported a timeout is the one the rest waited for.
"""

from __future__ import annotations

from ddptui.diagnose import signatures as sig
from ddptui.diagnose.diagnosis import Cause
from ddptui.diagnose.facts import RankFacts, RunFacts
from ddptui.diagnose.finding import Finding, Key, Tier, cite, first_said, last_lines, where
from ddptui.events import LogLine

_INF = float("inf")


def _timeout_line(rf: RankFacts) -> LogLine | None:
    return first_said(rf, lambda t: sig.GLOO_TIMEOUT.search(t) or sig.NCCL_WATCHDOG.search(t)
                      or sig.NCCL_HEARTBEAT in t)


def _culprit(by_rank: dict[int, RankFacts], waited: set[int], world: int | None
             ) -> tuple[int | None, str]:
    """The rank that stopped progressing first, and why ddptui thinks so."""
    ranks = set(by_rank) | set(range(world or 0))
    steps = {r: rf.last_step for r, rf in by_rank.items() if rf.last_step is not None}
    if len(steps) >= 2 and min(steps.values()) < max(steps.values()):
        low = min(steps.values())
        lows = [r for r, s in steps.items() if s == low]
        best = min(lows, key=lambda r: by_rank[r].last_step_time or _INF)
        top = max(steps, key=lambda r: steps[r])
        return best, f"its last step was {low} while rank {top} reached {steps[top]}"
    quiet = sorted(ranks - waited)
    if len(quiet) == 1:
        return quiet[0], "it is the only rank that never reported waiting"
    pool = quiet or sorted(ranks)
    heard = [r for r in pool if r in by_rank and by_rank[r].last_time is not None]
    if not heard:
        return None, ""
    best = min(heard, key=lambda r: (steps.get(r, -1), by_rank[r].last_time or _INF))
    return best, "it went quiet first"


def collective_timeout(facts: RunFacts, claimed: set[Key], world: int | None = None
                       ) -> list[Finding]:
    # The latest attempt's owner of each global rank (a restart may have moved it).
    by_rank = {rf.rank: rf for rf in facts.ranks.values()}
    timed: dict[int, LogLine] = {}
    for r, rf in by_rank.items():
        if (rf.node, r) in claimed:
            continue
        line = _timeout_line(rf)
        if line is not None:
            timed[r] = line
    if not timed:
        return []
    first = min(timed.values(), key=lambda ln: ln.time)
    culprit, why = _culprit(by_rank, set(timed), world)
    waiting = ", ".join(str(r) for r in sorted(timed))
    plural = "s" if len(timed) > 1 else ""
    m = sig.GLOO_TIMEOUT.search(first.text) or sig.NCCL_WATCHDOG.search(first.text)
    kind = "a collective"
    if m is not None and m.re is sig.GLOO_TIMEOUT:
        kind = f"a gloo {m.group(2)} ({int(m.group(1)) / 1000:g} s timeout)"
    elif m is not None:
        kind = f"NCCL {m.group(2)} #{m.group(1)}"
    watchdog = _watchdog(by_rank[first.rank], first) if m is not None and first.rank is not \
        None and first.rank in by_rank and m.re is sig.NCCL_WATCHDOG else ""
    evidence = [cite(timed[r]) for r in sorted(timed)][:4]
    explains: set[Key] = {(by_rank[r].node, r) for r in timed}
    if culprit is None:
        return [Finding(Cause.COLLECTIVE_TIMEOUT, first.node, None, first.time,
                        f"rank{plural} {waiting} timed out waiting in {kind}{watchdog}; no rank "
                        "could be named as the one that stopped first",
                        _advice(None), evidence, Tier.WAIT, explains)]
    crf = by_rank.get(culprit)
    node = crf.node if crf is not None else None
    if crf is not None and (last := last_lines(crf, 1)):
        evidence.append(f"last line of rank {culprit}: {cite(last[0])}")
        explains.add((crf.node, culprit))
    what = (f"rank{plural} {waiting} timed out waiting in {kind} for {where(node, culprit)}, "
            f"which stopped progressing first: {why}{watchdog}")
    return [Finding(Cause.COLLECTIVE_TIMEOUT, node, culprit, first.time, what, _advice(culprit),
                    evidence, Tier.WAIT, explains)]


def _watchdog(rf: RankFacts, line: LogLine) -> str:
    """NCCL's watchdog in words: the stuck collective's sequence number, how long it ran
    against its timeout, and how far the rank's queue got (torch >= 2.2's next line)."""
    m = sig.NCCL_WATCHDOG.search(line.text)
    if m is None:
        return ""
    out = f" (NCCL's watchdog: {m.group(2)} with sequence number {m.group(1)}"
    t = sig.NCCL_WATCHDOG_TIME.search(line.text)
    if t is not None:
        out += f" ran {int(t.group(2)) / 1000:g} s against its {int(t.group(1)) / 1000:g} s timeout"
    p = next((q for ln in rf.lines if (q := sig.NCCL_WORK_PROGRESS.search(ln.text))), None)
    if p is not None:
        out += (f"; rank {rf.rank} had completed up to #{p.group(2)} and queued up to "
                f"#{p.group(1)}")
    return out + ")"


def _advice(culprit: int | None) -> str:
    who = f"rank {culprit}" if culprit is not None else "the rank that stopped"
    return (f"look at what {who} was doing at its last line (a collective the other ranks "
            "never reach, a slow data loader, a dead peer); with NCCL, "
            "TORCH_NCCL_TRACE_BUFFER_SIZE and TORCH_NCCL_DUMP_ON_TIMEOUT=1 record which "
            "collective each rank was in")
