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


def rank_pids(marker: bytes, want: set[int]) -> dict[int, tuple[int, int | None]]:
    """rank -> its own process and local rank."""
    found: dict[int, tuple[int, int | None, int]] = {}
    for pid, env, fields in procs():
        if marker not in env:
            continue
        vals = dict(e.split(b"=", 1) for e in env if b"=" in e)
        rank, local = vals.get(b"RANK", b""), vals.get(b"LOCAL_RANK", b"")
        if rank.isdigit():
            found[pid] = (int(rank), int(local) if local.isdigit() else None, int(fields[1]))
    ranks = {}
    for pid, (r, lr, ppid) in sorted(found.items()):
        # a rank's own process; a data loader's worker has the same RANK and the rank as parent
        parent = found.get(ppid)
        if (parent is None or parent[0] != r) and (not want or r in want):
            ranks[r] = (pid, lr)
    return ranks
