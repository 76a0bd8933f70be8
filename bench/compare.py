"""Before and after: the launch, stop, stream and UI-latency benchmarks on two trees in turn.

Each figure is printed for every run, with its median per tree and their ratio.

One command (as root, like the benchmarks it runs)::

    git worktree add /tmp/before <commit>          # the tree to compare against
    python bench/compare.py /tmp/before .           # A = before, B = after

Each tree runs its own ``bench/<name>.py`` with ``PYTHONPATH`` set to the tree, so it and
every ``ddptui`` process it starts import that tree's code (checked before anything runs:
an editable install of the other tree would otherwise answer). For each benchmark the trees
take turns, A, B, A, B (``--rounds`` of each), so a machine whose load drifts over minutes
weighs on both alike; absolute figures on a shared machine still move run to run (see
docs/benchmarks.md), so read the ratio next to the spread of each side's own figures. A
benchmark that exits 1 (a target of its own missed) still gives figures; one that crashes or
outlives ``--timeout`` is named and its log kept.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: Each benchmark at a size that takes a minute or two on a quiet 2-core machine.
ARGS = {
    "launch": "--sizes 1 4 --rounds 1",
    "stop": "--sizes 1 4 16 --rounds 1 --grace 2",
    "stream": "--sizes 1 4 --lines 100000 --latency-secs 10 --memory-secs 0",
    "ui_latency": "--samples 100 --blocks 6 --total 1000000",
}


@dataclass(frozen=True)
class Figure:
    """One number a benchmark prints: its label (the match's named groups filled in) and the
    group that holds it."""

    pattern: str
    label: str
    value: str
    higher_is_better: bool = False


_N = r"(?P<n>\d+)"
FIGURES: dict[str, list[Figure]] = {
    "launch": [
        Figure(r"one local node: ddptui (?P<t>[\d.]+) s, bare torchrun (?P<b>[\d.]+) s",
               "launch, one local node (s)", "t"),
        Figure(r"one local node: .* ratio (?P<r>[\d.]+)", "launch, one local node / torchrun",
               "r"),
        Figure(rf"^\s*{_N} hosts: ddptui (?P<t>[\d.]+) s", "launch, {n} hosts (s)", "t"),
        Figure(rf"^\s*{_N} hosts: .*ddptui/pdsh (?P<r>[\d.]+)", "launch, {n} hosts / pdsh", "r"),
    ],
    "stop": [
        Figure(rf"^\s*{_N} hosts, (?P<kind>\w+)\s*: no process left after (?P<t>[\d.]+) s",
               "stop, {n} hosts, {kind} (s)", "t"),
    ],
    "stream": [
        Figure(rf"^\s*{_N} hosts x \d+ lines: .*ddptui delivered (?P<r>[\d,]+) lines/s",
               "stream, {n} hosts, delivered (lines/s)", "r", higher_is_better=True),
        Figure(rf"^\s*{_N} hosts x \d+ lines: .*ddptui/ssh-cat (?P<r>[\d.]+)",
               "stream, {n} hosts, ddptui / ssh cat", "r", higher_is_better=True),
        Figure(rf"^\s*{_N} hosts x \d+ lines: .*attach caught up at (?P<r>[\d,]+) lines/s",
               "stream, {n} hosts, attach (lines/s)", "r", higher_is_better=True),
        Figure(rf"latency, {_N} ranks x [\d.]+ lines/s: p50 (?P<p>\d+) ms",
               "stream, latency {n} ranks, p50 (ms)", "p"),
        Figure(rf"latency, {_N} ranks x [\d.]+ lines/s: .*p95 (?P<p>\d+) ms",
               "stream, latency {n} ranks, p95 (ms)", "p"),
    ],
    "ui_latency": [
        Figure(r"no lines \(idle\):\s+p50\s+[\d.]+ ms\s+p95\s+(?P<p>[\d.]+) ms",
               "ui, key to repaint, idle, p95 (ms)", "p"),
        Figure(r"lines/s from \d+ ranks:\s+p50\s+(?P<p>[\d.]+) ms", "ui, key to repaint, "
               "flood, p50 (ms)", "p"),
        Figure(r"lines/s from \d+ ranks:\s+p50\s+[\d.]+ ms\s+p95\s+(?P<p>[\d.]+) ms",
               "ui, key to repaint, flood, p95 (ms)", "p"),
        Figure(r"RSS after [\d,]+ lines: dashboard (?P<m>[\d.]+) MB", "ui, dashboard RSS (MB)",
               "m"),
        Figure(r"RSS after [\d,]+ lines: .*engine (?P<m>[\d.]+) MB", "ui, engine RSS (MB)", "m"),
    ],
}


#: A run's figures: label -> (value, whether higher is better).
Figures = dict[str, tuple[float, bool]]


def figures(name: str, out: str) -> Figures:
    """Every figure of ``name`` that ``out`` holds, by label."""
    found: Figures = {}
    for f in FIGURES[name]:
        for m in re.finditer(f.pattern, out, re.M):
            found[f.label.format(**m.groupdict())] = (
                float(m.group(f.value).replace(",", "")), f.higher_is_better)
    return found


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that makes ``tree``'s ddptui the one imported, checked."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    got = subprocess.run([sys.executable, "-c", "import ddptui; print(ddptui.__file__)"],
                         env=env, cwd=tree, capture_output=True, text=True, check=True,
                         timeout=60).stdout.strip()
    if not Path(got).resolve().is_relative_to(tree):
        raise SystemExit(f"with PYTHONPATH={tree}, ddptui came from {got}")
    return env


def run_one(name: str, tree: Path, env: dict[str, str], args: str, log: Path,
            timeout: float) -> Figures:
    argv = [sys.executable, str(tree / "bench" / f"{name}.py"), *shlex.split(args)]
    t0 = time.monotonic()
    with log.open("w") as f:
        try:
            rc = subprocess.run(argv, env=env, cwd=tree, stdout=f, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            f.write(f"\n(outlived {timeout:.0f} s)\n")
            rc = -1
    load = os.getloadavg()[0]
    print(f"  {name} on {tree}: rc {rc}, {time.monotonic() - t0:.0f} s, load {load:.1f}, "
          f"log {log}", flush=True)
    # A benchmark that crashes exits 1 as well, as one that missed a target does; what it
    # measured before it crashed still counts (a 16-host size that timed out on a loaded
    # machine leaves the smaller sizes' figures).
    if rc not in (0, 1) or "Traceback (most recent call last)" in log.read_text():
        print("    failed; its last lines:\n" + "\n".join(
            "    " + line for line in log.read_text().splitlines()[-8:]), flush=True)
    return figures(name, log.read_text())


def report(a: list[Figures], b: list[Figures]) -> None:
    """Each figure: every run's value on each side, both medians and B / A; "B slower" (or
    "B lower" where higher is better) marks a median that moved the wrong way, by any
    amount: judge it against each side's own spread."""
    labels = dict.fromkeys(k for run in a + b for k in run)
    print(f"{'figure':<40} {'A runs':>17} {'B runs':>17} {'A med':>8} {'B med':>8} {'B/A':>5}")
    for k in labels:
        av, bv = [r[k][0] for r in a if k in r], [r[k][0] for r in b if k in r]
        if not av or not bv:
            print(f"{k:<40} {_runs(av):>17} {_runs(bv):>17}  (missing on one side)")
            continue
        higher = next(r[k][1] for r in a + b if k in r)
        am, bm = statistics.median(av), statistics.median(bv)
        ratio = bm / am if am else float("nan")
        worse = ratio < 1 if higher else ratio > 1
        mark = ("B lower" if higher else "B slower") if worse else ""
        print(f"{k:<40} {_runs(av):>17} {_runs(bv):>17} {_num(am):>8} {_num(bm):>8} {ratio:>5.2f} "
              f"{mark}{' (higher is better)' if higher else ''}")


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def _runs(values: list[float]) -> str:
    return " ".join(_num(v) for v in values) or "-"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=Path, help="tree A (before)")
    p.add_argument("b", type=Path, help="tree B (after)")
    p.add_argument("--only", nargs="+", choices=list(ARGS), default=list(ARGS))
    p.add_argument("--rounds", type=int, default=2, help="runs of each tree per benchmark")
    p.add_argument("--timeout", type=float, default=900, help="seconds one benchmark run may take")
    p.add_argument("--logs", type=Path, default=None, help="where each run's output is kept")
    for name, args in ARGS.items():
        p.add_argument(f"--{name.replace('_', '-')}-args", default=args, metavar="ARGS",
                       help=f"{name}.py's arguments (default: {args})")
    ns = p.parse_args()
    trees = (ns.a.resolve(), ns.b.resolve())
    envs = [tree_env(t) for t in trees]
    logs: Path = ns.logs or Path(tempfile.mkdtemp(prefix="ddptui-compare-"))
    logs.mkdir(parents=True, exist_ok=True)
    print(f"A = {trees[0]}\nB = {trees[1]}\nlogs in {logs}", flush=True)
    results: dict[str, tuple[list[Figures], list[Figures]]] = {}
    for name in ns.only:
        args = getattr(ns, f"{name}_args")
        print(f"{name}.py {args}", flush=True)
        runs: tuple[list[Figures], list[Figures]] = ([], [])
        for r in range(ns.rounds):
            for side, (tree, env) in enumerate(zip(trees, envs, strict=True)):
                log = logs / f"{name}.{'AB'[side]}{r + 1}.log"
                runs[side].append(run_one(name, tree, env, args, log, ns.timeout))
        results[name] = runs
    print()
    for a, b in results.values():
        report(a, b)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
