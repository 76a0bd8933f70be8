"""Whose run it is: the controller recorded in ``run.json``, and whether it still lives.

Only a run's controller writes its status, so a controller that dies (a closed terminal, a
SIGKILL, a reboot) leaves ``running`` in ``run.json`` for good. Each controller therefore
records who it is: host, boot, pid and the pid's start time (a pid alone is reused). From
that, a reader tells a live run from a stale one with local facts only, at once; asking the
run's nodes is :mod:`ddptui.afterwards.reconcile`'s job, and only on request.
"""

from __future__ import annotations

import os
import socket
from enum import StrEnum
from typing import Any

from ddptui.run_notes import Controller


class Owner(StrEnum):
    """What is known of a run's controller from this machine."""

    ALIVE = "alive"  # this host, this boot, the same process
    GONE = "gone"  # this host, and that process is no more
    ELSEWHERE = "elsewhere"  # recorded on another host: nothing can be said from here
    UNKNOWN = "unknown"  # run.json names no controller (a run from an older ddptui)


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """The process's start, in clock ticks since boot: with the pid, names one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return ""
    fields = stat[stat.rfind(b")") + 2:].split()
    return fields[19].decode() if len(fields) > 19 else ""


def this_controller() -> Controller:
    """This process as a run's controller, for ``run.json``."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": pid,
            "start": _start_time(pid)}


def owner_of(meta: dict[str, Any]) -> Owner:
    rec = meta.get("controller")
    if not isinstance(rec, dict) or not isinstance(rec.get("pid"), int):
        return Owner.UNKNOWN
    if rec.get("detached"):
        return Owner.GONE  # it let go of the run (ddptui attach takes it up again)
    if rec.get("host") != socket.gethostname():
        return Owner.ELSEWHERE
    if rec.get("boot") and rec.get("boot") != _boot_id():
        return Owner.GONE
    start = _start_time(rec["pid"])
    return Owner.ALIVE if start and start == rec.get("start") else Owner.GONE
