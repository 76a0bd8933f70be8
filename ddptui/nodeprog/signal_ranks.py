"""Sends one signal to each rank process of a run on one node (the ones torchrun started:
not torchrun, whose default for SIGUSR2 is to die, and not a rank's data loader workers),
so that the run saves a checkpoint before its allocation's time limit (see
:mod:`ddptui.live.timelimit`).

Its arguments: the run's marker, the signal's name (``USR2``), why (``time limit`` or
``rehearsal``) and the node dir's mark to leave: a ddptui that follows the run from
elsewhere reads there, when the run ends, that its ranks left at the signal (as a stop leaves
``stop_requested``). A rank that does not catch the signal is not sent it: its default
action (USR1, USR2: the end) would kill it now, which is no save; a rank still starting
catches nothing yet. A rank that ends while it is looked at is neither: it has nothing left to
save. It prints one JSON line: each rank signalled (rank, local rank, pid), each that does not
catch the signal (rank, pid), and each it could not signal, why.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from ddptui.nodeprog.procs import rank_pids


def send(marker: bytes, name: str, why: str = "", mark: str = "") -> dict[str, object]:
    sig = getattr(signal, "SIG" + name)
    targets: list[tuple[int, int | None, int]] = []
    deaf: list[list[int]] = []
    failed: list[list[object]] = []
    for rank, (pid, local) in sorted(rank_pids(marker, set()).items()):
        caught = catches(pid, sig)
        if caught:
            targets.append((rank, local, pid))
        elif caught is not None:  # its default action would end it now: that is no save
            deaf.append([rank, pid])
    if mark and targets:  # first: a rank that leaves at once finds its run's end explained
        tmp = mark + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"signal": name, "sent_at": time.time(), "why": why,
                       "ranks": len(targets)}, f)
        os.replace(tmp, mark)
    sent: list[list[object]] = []
    for rank, local, pid in targets:
        try:
            os.kill(pid, sig)
            sent.append([rank, local, pid])
        except ProcessLookupError:  # it has ended since it was looked at
            pass
        except OSError as e:
            failed.append([rank, pid, e.strerror or str(e)])
    return {"signalled": sent, "deaf": deaf, "failed": failed}


def catches(pid: int, sig: int) -> bool | None:
    """Whether the process has a handler for ``sig`` (``SigCgt`` in its status); None when
    it has ended."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (FileNotFoundError, ProcessLookupError):
        return None
    except (OSError, ValueError, IndexError):
        pass
    return False


if __name__ == "__main__":
    print(json.dumps(send(sys.argv[1].encode(), *sys.argv[2:5])), flush=True)
