"""Rings when a node's log grows (:mod:`ddptui.live.doorbell` says why): its argument is the
log's path; on stdin, one line per wait of the follower, the size it has read up to (it arms
the bell); it writes one byte when the log's size differs, and ends at end of file.
"""

from __future__ import annotations

import os
import select
import sys


def ring(path: str, inp: int = 0, out: int = 1) -> None:
    armed: int | None = None
    pending = b""
    while True:
        ready, _, _ = select.select([inp], [], [], None if armed is None else 0.01)
        if ready:
            data = os.read(inp, 4096)
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            if lines:
                armed = int(lines[-1])
        if armed is None:
            continue
        try:
            size = os.stat(path).st_size
        except OSError:
            continue
        if size != armed:
            armed = None
            try:
                os.write(out, b".")
            except OSError:
                break


if __name__ == "__main__":
    ring(sys.argv[1])
