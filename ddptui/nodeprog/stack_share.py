"""A burst of stack samples of the run's ranks on one node, counted, not kept: how many of each
rank's samples were inside a collective or its wait (:mod:`ddptui.nodeprog.spy`).

Each sample is one ``py-spy dump`` of every rank at once (Python frames only: about 25 ms each,
the rank paused while py-spy reads it). A sample whose main thread is inside
``loss.backward()`` is taken again with ``--native``, where DDP's wait for its all-reduce
shows, at most ``native`` times a rank a burst: a native dump unwinds the C++ stack, about a
second each, so a sample past that is left unresolved (counted apart, in no share).

Its arguments: the run's marker, the samples a rank, the seconds between them, the native
dumps a rank and the seconds one dump may take. It prints one JSON line: each rank's counts,
and the longest dump of each kind (each is at most the time a rank was paused for it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from ddptui.nodeprog.procs import rank_pids
from ddptui.nodeprog.spy import in_backward, inside_collective, py_spy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable


def dumps(spy: str, pids: Iterable[int], native: bool, timeout: float
          ) -> dict[int, tuple[str, str, float]]:
    """pid -> (stack, error, seconds it took), each rank's dump taken at once."""
    t0 = time.monotonic()
    extra = ["--native"] if native else []
    running = {pid: subprocess.Popen([spy, "dump", *extra, "--pid", str(pid)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for pid in pids}
    out = {}
    for pid, p in running.items():
        try:
            so, se = p.communicate(timeout=max(0.1, timeout - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            out[pid] = ("", f"py-spy did not answer within {timeout:g} s", timeout)
            continue
        err = se.decode("utf-8", "replace").strip().splitlines() if p.returncode else []
        out[pid] = (so.decode("utf-8", "replace"),
                    (err[:1] or [f"py-spy exited {p.returncode}"])[0] if p.returncode else "",
                    time.monotonic() - t0)
    return out


def sample(marker: bytes, samples: int, gap: float, native: int, timeout: float
           ) -> dict[str, object]:
    spy = py_spy()
    ranks = {pid: rank for rank, (pid, _) in rank_pids(marker, set()).items()}
    counts = {pid: [0, 0, 0] for pid in ranks}  # samples, inside, unresolved
    errors: dict[int, str] = {}
    natives = dict.fromkeys(ranks, 0)
    longest = {"python": 0.0, "native": 0.0}
    for i in range(samples if spy else 0):
        if i:
            time.sleep(gap)
        live = [pid for pid in ranks if pid not in errors]
        taken = dumps(str(spy), live, False, timeout)
        again = [pid for pid in live if in_backward(taken[pid][0]) and natives[pid] < native]
        for pid in again:
            natives[pid] += 1
        if again:
            taken.update(dumps(str(spy), again, True, timeout))
        for pid in live:
            stack, err, took = taken[pid]
            kind = "native" if pid in again else "python"
            longest[kind] = max(longest[kind], took)
            if err:
                errors[pid] = err
            elif in_backward(stack) and pid not in again:
                counts[pid][2] += 1
            else:
                counts[pid][0] += 1
                counts[pid][1] += inside_collective(stack)
    rows = [{"rank": rank, "pid": pid, "samples": counts[pid][0], "inside": counts[pid][1],
             "unresolved": counts[pid][2], "error": errors.get(pid, "")}
            for pid, rank in sorted(ranks.items(), key=lambda kv: kv[1])]
    return {"py_spy": spy, "python": sys.executable, "ranks": rows, "longest_s": longest}


if __name__ == "__main__":
    print(json.dumps(sample(sys.argv[1].encode(), int(sys.argv[2]), float(sys.argv[3]),
                            int(sys.argv[4]), float(sys.argv[5]))))
