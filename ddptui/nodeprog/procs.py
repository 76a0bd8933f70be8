"""How every node program finds processes: each live one (not a zombie) with its environment
and its ``/proc/PID/stat`` fields after the name (state, ppid, pgrp, ...). A run's own are
those whose environment holds its marker (``DDPTUI_RUN=<run>/<node rank>``, which every
process torchrun starts inherits, whatever session it makes) or that are in its group.

Shipped inside the programs that import it (:func:`ddptui.nodeprog.source`).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator


def procs() -> Iterator[tuple[int, list[bytes], list[bytes]]]:
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open("/proc/" + d + "/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/" + d + "/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = live_fields(stat)
        if fields:
            yield int(d), env, fields


def live_fields(stat: bytes) -> list[bytes] | None:
    fields = stat[stat.rfind(b")") + 2:].split()
    return fields if fields and fields[0] != b"Z" else None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return live_fields(f.read()) is not None
    except OSError:
        return False
