"""What a node says of a run that ddptui finds unsettled: its processes still alive, whether a
stop was asked for, whether an early start gave up, and the exit code ``launch.sh`` wrote.

Its arguments: the run's marker and the paths of the exit code, stop request and expired
files. It prints one JSON line (read by :mod:`ddptui.afterwards.reconcile`).
"""

from __future__ import annotations

import json
import os
import sys

from ddptui.nodeprog.procs import procs


def check(marker: bytes, exit_path: str, stop_path: str, expired_path: str
          ) -> dict[str, object]:
    alive = [pid for pid, env, _ in procs() if marker in env]
    try:
        with open(exit_path) as f:
            code = f.read().strip()
    except OSError:
        code = ""
    return {"alive": sorted(alive), "stop_requested": os.path.exists(stop_path),
            "expired": os.path.exists(expired_path),
            "exit_code": int(code) if code.lstrip("-").isdigit() else None}


if __name__ == "__main__":
    print(json.dumps(check(sys.argv[1].encode(), *sys.argv[2:5])))
