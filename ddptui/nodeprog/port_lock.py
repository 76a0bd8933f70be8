"""Takes the first rendezvous port it can on the store's node, or says who holds each one
(:mod:`ddptui.launch.reserve` says why). A lock is a directory; ``owner`` in it names the run
and its node dir. Its one argument is a JSON object (:func:`ddptui.launch.reserve.reserve_cmd`);
it prints one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


#: How much later than the lock's pid file a process may seem to start and still be its
#: writer: the boot time /proc gives is whole seconds.
REUSED_AFTER_S = 2.0


def started(ticks: int) -> float | None:
    """When a process started, as ``time.time()`` counts, from its ``/proc/PID/stat``
    start time (clock ticks since boot); None where /proc does not say."""
    try:
        with open("/proc/stat") as f:
            boot = next(int(ln.split()[1]) for ln in f if ln.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def alive(a: dict[str, Any], lock: str) -> tuple[str, bool]:
    """The run that holds ``lock``, and whether it still does."""
    try:
        with open(os.path.join(lock, a["owner"])) as f:
            run, ndir = ([*f.read().split("\n"), "", ""])[:2]
    except OSError:
        run, ndir = "", ""
    if ndir and os.path.exists(os.path.join(ndir, a["exit"])):
        return run, False  # the run ended there (its launch.sh may linger a moment)
    pid_file = os.path.join(lock, a["pid"])
    try:
        with open(pid_file) as f:
            pid = int(f.read())
        written = os.stat(pid_file).st_mtime
    except (OSError, ValueError):  # not started yet: live while the launch may still be on
        try:
            return run, time.time() - os.stat(lock).st_mtime < a["young_s"]
        except OSError:
            return run, False
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            return run, False  # ended, not yet reaped
        born = started(int(fields[19]))
        # the shell writes its own pid: a process with that pid born later is another one,
        # the pid reused (they come round fast where pid_max is 32768)
        if born is not None and born > written + REUSED_AFTER_S:
            return run, False
    except (OSError, IndexError, ValueError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return run, False
    except OSError:
        pass
    return run, True


def ours(a: dict[str, Any], lock: str) -> bool:
    """The lock names this very run and node dir (a node dir is made once, by one launch):
    taken by this launch already, so asking again finds it its own, not another run's."""
    try:
        with open(os.path.join(lock, a["owner"])) as f:
            return f.read().split("\n")[:2] == [a["run"], a["ndir"]]
    except OSError:
        return False


def remove(path: str) -> None:
    try:
        for f in os.listdir(path):
            os.unlink(os.path.join(path, f))
        os.rmdir(path)
    except OSError:
        pass


def take(a: dict[str, Any], lock: str) -> bool:
    """The lock appears with its owner already in it: made aside, then renamed into place (a
    rename onto a lock that holds its owner fails), so that a run that finds it taken can
    always name who took it."""
    new = f"{lock}.new.{os.getpid()}"
    os.mkdir(new)
    with open(os.path.join(new, a["owner"]), "w") as f:
        f.write(a["run"] + "\n" + a["ndir"] + "\n")
    try:
        os.rename(new, lock)
        return True
    except OSError:
        remove(new)
        return False


def reserve(a: dict[str, Any]) -> dict[str, object]:
    os.makedirs(a["dir"], exist_ok=True)
    with contextlib.suppress(OSError):
        os.chmod(a["dir"], 0o1777)
    held: list[list[object]] = []
    for port in a["ports"]:
        lock = os.path.join(a["dir"], "{}-{}".format(a["key"], port))
        for _ in range(2):
            if take(a, lock) or ours(a, lock):
                return {"port": port, "lock": lock, "held": held}
            run, live = alive(a, lock)
            if live:
                held.append([port, run])
                break
            stale = f"{lock}.stale.{os.getpid()}"
            try:
                os.rename(lock, stale)
            except OSError:
                continue
            remove(stale)
    return {"port": None, "held": held}


if __name__ == "__main__":
    print(json.dumps(reserve(json.loads(sys.argv[1]))))
