"""The ranks' Python stacks on one node, taken with ``py-spy dump`` (see
:mod:`ddptui.remote.stacks`): the run's rank processes found by its marker and the ``RANK``
and ``LOCAL_RANK`` torchrun gives each worker, and every dump taken at once.

Its arguments: the run's marker, the ranks wanted (comma separated; empty: all) and the
seconds one dump may take. It prints one JSON line.
"""

from __future__ import annotations

import json
import subprocess
import sys

from ddptui.nodeprog.procs import rank_pids
from ddptui.nodeprog.spy import py_spy


def dump(marker: bytes, want: set[int], timeout: float) -> dict[str, object]:
    spy = py_spy()
    out: dict[str, object] = {"py_spy": spy, "python": sys.executable}
    rows: list[dict[str, str | int | None]] = []
    out["ranks"] = rows
    running = []
    for rank, (pid, local) in sorted(rank_pids(marker, want).items()):
        p = None
        if spy:
            p = subprocess.Popen([spy, "dump", "--pid", str(pid)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        running.append((rank, pid, local, p))
    for rank, pid, local, p in running:
        stack, err = "", ""
        if p is not None:
            try:
                so, se = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                so, se = p.communicate()
                se = f"py-spy did not answer within {timeout:g} s".encode()
            stack = so.decode("utf-8", "replace")
            if p.returncode:
                err = se.decode("utf-8", "replace").strip() or f"py-spy exited {p.returncode}"
        rows.append({"rank": rank, "local_rank": local, "pid": pid, "stack": stack,
                     "error": err})
    return out


if __name__ == "__main__":
    print(json.dumps(dump(sys.argv[1].encode(), {int(r) for r in sys.argv[2].split(",") if r},
                          float(sys.argv[3]))))
