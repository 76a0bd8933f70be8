"""The automatic preflight's cost: what it adds to a launch on 1 to 16 hosts.

One command: ``python bench/preflight.py`` (as root: it builds a namespace cluster of 16
hosts with their own sshd, see ``tests/cluster.py``). For each size, in the same run, ddptui
reaches every host as a launch does (connect, authenticate, probe the interpreter and torch:
the baseline, which every launch pays anyway) and then runs the fast preflight over those open
connections (one check program per node, the endpoint listening for every node's connect), as
``sequence.py`` does before starting anything. Each figure is the median of ``--rounds``.

Target: the preflight adds at most 2 s to the connection at 16 hosts. Its ratio to the
connection is printed beside it; on a machine whose cores are fewer than the hosts, every
host's check program queues for the same cores, so both grow with the hosts here where a real
cluster runs them on a machine each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_setup import ROOT, hosts_file, make_cluster, median

sys.path.insert(0, str(ROOT))

from ddptui.config import load_config
from ddptui.launch.precheck import before_launch
from ddptui.remote.reach import answers, failures, map_at_once, probe_node

TARGET_S = 2.0


def measure(path: Path) -> tuple[float, float, list[str]]:
    """(seconds to reach every node, seconds of preflight over those connections, problems)."""
    cfg = load_config(path)
    t0 = time.perf_counter()
    results = map_at_once(list(cfg.nodes), lambda n: probe_node(n, cfg))
    t1 = time.perf_counter()
    bad = [str(f.error) for f in failures(results)]
    if bad:
        raise RuntimeError("; ".join(bad))
    reached = answers(results)
    transports = {r.item.name: r.value[0] for r in reached}
    probes = {r.item.name: r.value[1] for r in reached}
    try:
        outcome = before_launch(cfg, transports, probes)
        t2 = time.perf_counter()
    finally:
        for t in transports.values():
            t.close()
    return t1 - t0, t2 - t1, list(outcome.verdict.problems)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    c = make_cluster(max(args.sizes))
    ok = True
    try:
        work = Path(tempfile.mkdtemp(prefix="ddptui-bench-preflight-"))
        print(f"{'hosts':>5}  {'connect+probe':>13}  {'preflight':>9}  {'ratio':>6}  target")
        for k in args.sizes:
            reach_s, pre_s = [], []
            for r in range(args.rounds):
                path = hosts_file(c, c.hosts[:k], work / f"k{k}-r{r}", "print('hi')\n")
                a, b, problems = measure(path)
                if problems:
                    print(f"  {k} hosts: the preflight found problems: {problems}")
                    ok = False
                reach_s.append(a)
                pre_s.append(b)
            ra, pr = median(reach_s), median(pre_s)
            met = pr <= TARGET_S
            ok &= met or k < 16
            print(f"{k:>5}  {ra:>12.2f}s  {pr:>8.2f}s  {pr / ra:>5.2f}x  "
                  f"{'<= 2 s: ' + ('met' if met else 'MISSED') if k == 16 else ''}", flush=True)
    finally:
        c.close()
    print("all targets met" if ok else "some target missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
