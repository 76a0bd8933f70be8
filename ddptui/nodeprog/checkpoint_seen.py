"""Looks on one node for the run's checkpoint written after a moment (the time limit's
signal): the newest path matching the run's ``slurm.checkpoint`` pattern (a glob, relative
to where the script runs) that changed since then (see :mod:`ddptui.live.timelimit`).

Its arguments: the folder the script runs in, the pattern and the moment (seconds since the
epoch). It prints one JSON line: the newest match changed since the moment (or null), how
many matches there are in all, and the node's clock.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time


def changed(path: str) -> float:
    """When a file, or a folder or anything in it (a checkpoint may be a folder of files),
    last changed."""
    newest = os.stat(path).st_mtime
    if os.path.isdir(path):
        for name in os.listdir(path):
            try:
                newest = max(newest, os.stat(os.path.join(path, name)).st_mtime)
            except OSError:
                continue
    return newest


def look(cwd: str, pattern: str, since: float) -> dict[str, object]:
    where = os.path.join(os.path.expanduser(cwd), os.path.expanduser(pattern))
    newest, count = None, 0
    for path in glob.glob(where, recursive=True):
        try:
            when = changed(path)
        except OSError:  # removed meanwhile
            continue
        count += 1
        if when >= since and (newest is None or when > newest[1]):
            newest = (path, when)
    return {"newest": None if newest is None else {"path": newest[0], "mtime": newest[1]},
            "matches": count, "now": time.time()}


if __name__ == "__main__":
    print(json.dumps(look(sys.argv[1], sys.argv[2], float(sys.argv[3]))), flush=True)
