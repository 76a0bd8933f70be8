"""Stops a run's processes on one node: SIGTERM to each, the grace, SIGKILL to what is left.

Its arguments: the run's marker (``DDPTUI_RUN=<run>/<node rank>``), the grace in seconds
(``-``: on standby, see :mod:`ddptui.remote.standby`: the grace comes on stdin, and with it
the go), the run's process group (0: none known) and the file it touches so that a
ddptui following from elsewhere reports "stopped", not "failed". It prints one JSON
line: the processes it found, the ranks it had to kill, and any left over.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time

from ddptui.nodeprog.procs import alive, procs

#: After its ranks are gone torchrun's agent only tears itself down (rendezvous, store, its
#: own interpreter): seconds of CPU when sixteen do it on shared cores (bench/stop.py), and
#: nothing of the user's to save. A tenth of a second, then SIGKILL.
AGENT_WAIT = 0.1


def members(marker: bytes, pgid: int) -> dict[int, bool]:
    """pid -> a rank (torchrun gives its workers LOCAL_RANK), else agent or shell."""
    found = {}
    for pid, env, fields in procs():
        if marker in env or (pgid > 0 and int(fields[2]) == pgid):
            found[pid] = any(e.startswith(b"LOCAL_RANK=") for e in env)
    return found


def signal_all(pids: dict[int, bool], pgid: int, sig: int) -> None:
    if pgid > 0:
        with contextlib.suppress(OSError):
            os.killpg(pgid, sig)
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, sig)


def still(left: dict[int, bool], marker: bytes, pgid: int, sig: int) -> dict[int, bool]:
    """The ones watched that live (a read of their stat each); once none does, a scan of /proc
    (a read of every process on the node) for any started meanwhile, signalled ``sig``."""
    left = {p: rank for p, rank in left.items() if alive(p)}
    if not left:
        left = members(marker, pgid)
        if left:
            signal_all(left, pgid, sig)
    return left


def stop(marker: bytes, grace: float, pgid: int) -> dict[str, list[int]]:
    first = members(marker, pgid)
    signal_all(first, pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = dict(first)
    while time.monotonic() < deadline:
        left = still(left, marker, pgid, signal.SIGTERM)
        if not left:
            break
        if not any(left.values()):
            # every rank is gone: torchrun's agent has nothing left to wait for but its
            # peers' rendezvous, which are being stopped too
            deadline = min(deadline, time.monotonic() + AGENT_WAIT)
        time.sleep(0.05)
    killed = sorted(p for p, rank in left.items() if rank)  # ranks that ignored SIGTERM
    if left:
        signal_all(left, pgid, signal.SIGKILL)  # the ones watched at once, the others after
        left = {**left, **members(marker, pgid)}
        signal_all(left, pgid, signal.SIGKILL)
        end = time.monotonic() + 5
        while left and time.monotonic() < end:
            time.sleep(0.05)
            left = still(left, marker, pgid, signal.SIGKILL)
    return {"found": sorted(first), "killed": killed, "leftover": sorted(left)}


def main(argv: list[str]) -> None:
    marker, grace, pgid = argv[0].encode(), argv[1], int(argv[2])
    if grace == "-":  # on standby: the grace comes on stdin, and with it the go
        grace = sys.stdin.readline().strip()
        if not grace:  # end of file: ddptui is done with it, nothing to stop
            sys.exit(0)
        print("stopping", flush=True)  # heard: the result follows within the grace
    with contextlib.suppress(OSError):
        open(argv[3], "w").close()
    print(json.dumps(stop(marker, float(grace), pgid)))


if __name__ == "__main__":
    main(sys.argv[1:])
