"""``ddptui check``'s output: one table, node by check, then one line for each failure.

The table shows only marks, so sixteen nodes fit a terminal; what was found is in
``--json``, and what is wrong is in the lines below the table, one per ✗, in the order of
the table (node rank, then check), so the first line is usually the one to fix first.
"""

from __future__ import annotations

import json
from typing import TextIO

from ddptui.diagnose.preflight import CHECKS, Mark, Verdict
from ddptui.launch.precheck import Outcome

_STATUS = {Mark.PASS: "pass", Mark.FAIL: "fail", Mark.SKIP: "n/a"}


def table(verdict: Verdict, nodes: list[str]) -> list[str]:
    width = max(len("node"), *(len(n) for n in nodes))
    head = "  ".join([f"{'node':<{width}}", *CHECKS])
    rows = [head]
    for node in nodes:
        cells = [f"{node:<{width}}"]
        for check in CHECKS:
            r = verdict.get(node, check)
            mark = str(r.mark) if r is not None else str(Mark.SKIP)
            cells.append(f"{mark:^{len(check)}}")
        rows.append("  ".join(cells).rstrip())
    return rows


def failure_lines(verdict: Verdict) -> list[str]:
    """Each failure, then each caution of a pass."""
    return ([f"✗ {r.check}: {r.problem}" for r in verdict.results
             if r.mark == Mark.FAIL and r.problem]
            + [f"! {r.check}: {r.problem}" for r in verdict.cautions])


def summary(outcome: Outcome) -> str:
    """What every node agreed on, and where the rendezvous was tested."""
    torches = {r.detail for r in outcome.verdict.results
               if r.check == "torch" and r.mark == Mark.PASS}
    ep = outcome.endpoint
    where = f"rendezvous {ep.host}:{ep.port}" + (f" on {ep.node}" if ep.node else "")
    if len(torches) == 1:
        return f"torch {torches.pop()} on every node checked; {where}"
    return where


def as_json(outcome: Outcome, nodes: list[str]) -> dict[str, object]:
    v = outcome.verdict
    return {
        "ok": v.ok,
        "seconds": round(outcome.seconds, 3),
        "endpoint": {"host": outcome.endpoint.host, "port": outcome.endpoint.port,
                     "node": outcome.endpoint.node},
        "checks": list(CHECKS),
        "nodes": {n: {r.check: {"status": _STATUS[r.mark], "detail": r.detail,
                                "problem": r.problem}
                      for r in v.results if r.node == n} for n in nodes},
        "problems": v.problems,
    }


def print_check(outcome: Outcome, nodes: list[str], out: TextIO, *, json_out: bool = False,
                ) -> int:
    """Print the verdict; the exit code: 0 when every check passed, 1 otherwise."""
    v = outcome.verdict
    if json_out:
        out.write(json.dumps(as_json(outcome, nodes), indent=2, ensure_ascii=False) + "\n")
        return 0 if v.ok else 1
    lines = table(v, nodes)
    fails = failure_lines(v)
    if fails:
        lines += ["", *fails]
    lines.append(summary(outcome))
    took = f"{outcome.seconds:.1f} s"
    if v.ok:
        lines.append(f"ddptui: {len(nodes)} node(s) ready ({took})")
    else:
        bad = sorted({r.node for r in v.results if r.mark == Mark.FAIL},
                     key=nodes.index)
        lines.append(f"ddptui: {len(v.problems)} problem(s) on {', '.join(bad)}; a run would fail "
                     f"or hang ({took})")
    out.write("\n".join(lines) + "\n")
    return 0 if v.ok else 1
