"""Stop time: from the stop request to the moment no process of the run is left on any host.

One command: ``python bench/stop.py`` (as root: it builds a namespace cluster of 16 hosts).
For 1, 2, 4, 8 and 16 hosts, a run of one process per host is launched through the
controller (``Session.launch``, as ``ddptui run`` does) and, once every rank has printed
its first line, stopped with ``Session.stop(grace)``. The clock stops when the last of the
run's processes on any host (the torchrun agents, the ranks, their launch shells: every
process carrying the run's ``DDPTUI_RUN`` marker) is gone or a zombie. Two kinds of ranks:

* cooperative: Python's default SIGTERM, they exit at once;
* stubborn: they ignore SIGTERM, so they live until the SIGKILL after ``--grace`` seconds.

Baselines in the same run: the 1-host figure of each kind (the target is flat in hosts) and
the grace itself. Targets: cooperative <= 1 s, stubborn <= grace + 1 s, at every size.
There is no pdsh baseline here: torchrun starts each rank in a session of its own, so a
``kill`` of the process group a user started leaves the ranks behind, and a ``pkill`` by
name from one namespace host reaches every host (they share this machine's PIDs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_setup import ROOT, Cluster, hosts_file, make_cluster, median

sys.path.insert(0, str(ROOT))

from ddptui.config import load_config
from ddptui.live.session import Session

COOPERATIVE = """import os, time
print(f"ready rank {os.environ['RANK']}", flush=True)
while True:
    time.sleep(0.05)
"""
STUBBORN = """import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"ready rank {os.environ['RANK']}", flush=True)
while True:
    time.sleep(0.05)
"""
READY_TIMEOUT_S = 240.0


def marked(run_id: str) -> list[int]:
    """Live (non-zombie) processes of the run on any host: all hosts share this PID space."""
    want = f"DDPTUI_RUN={run_id}/".encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes()
        except OSError:
            continue
        if want in env and _alive(int(d)):
            found.append(int(d))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] != b"Z"


def time_stop(c: Cluster, n: int, script: str, grace: float, work: Path) -> tuple[float, float]:
    """(request to no process left, request to ``stop()`` returning), seconds."""
    path = hosts_file(c, c.hosts[:n], work, script, stop_grace=grace)
    ctl = Session(load_config(path), state_root=work / "state")
    ctl.launch()
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(ctl.store.ranks) < n:
            if time.monotonic() > deadline or ctl.done:
                raise RuntimeError(f"{n} hosts: ranks never all spoke ({len(ctl.store.ranks)})")
            time.sleep(0.05)
        pids = marked(ctl.run_id)
    except BaseException:
        ctl.stop(grace=0)
        raise
    t0 = time.perf_counter()
    gone: list[float] = []

    def watch() -> None:
        end = time.monotonic() + grace + 60
        left = pids
        while left and time.monotonic() < end:
            time.sleep(0.01)
            left = [p for p in left if _alive(p)]
        gone.append(time.perf_counter() if not left else float("inf"))

    import threading

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    report = ctl.stop(grace=grace)
    returned = time.perf_counter()
    watcher.join(grace + 70)
    ctl.wait(30)
    late = marked(ctl.run_id)
    if late or not report.clean:
        raise RuntimeError(f"{n} hosts: left behind {late} / {report}")
    return gone[0] - t0, returned - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--grace", type=float, default=2.0)
    opts = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ddptui-bench-stop-"))
    c = make_cluster(max(opts.sizes), work / "cluster")
    rows: dict[tuple[str, int], float] = {}
    try:
        for n in opts.sizes:
            for kind, script in (("cooperative", COOPERATIVE), ("stubborn", STUBBORN)):
                got = [time_stop(c, n, script, opts.grace, work / f"{kind}-{n}-{r}")
                       for r in range(opts.rounds)]
                rows[kind, n] = median([g for g, _ in got])
                base = rows[kind, opts.sizes[0]]
                print(f"{n:2d} hosts, {kind:11s}: no process left after {rows[kind, n]:.2f} s "
                      f"(stop() returned after {median([r for _, r in got]):.2f} s); "
                      f"x{rows[kind, n] / base:.2f} the {opts.sizes[0]}-host figure", flush=True)
    finally:
        c.close()
        shutil.rmtree(work, ignore_errors=True)
    ok = True
    for (kind, _n), t in rows.items():
        limit = 1.0 if kind == "cooperative" else opts.grace + 1.0
        ok &= t <= limit
    lo, hi = min(opts.sizes), max(opts.sizes)
    for kind in ("cooperative", "stubborn"):
        print(f"{kind}: {hi} hosts / {lo} host {rows[kind, hi] / rows[kind, lo]:.2f}; "
              f"target <= {'1' if kind == 'cooperative' else f'grace + 1 = {opts.grace + 1:g}'} s")
    print("all targets met" if ok else "some target missed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
