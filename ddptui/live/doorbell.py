"""A node program that says when a node's log grows, so that its follower reads at once.

The follower reads ``node.log`` by offset (SFTP, or an exec channel for big reads: exact,
and resumable after a reconnect), and between reads it waited its poll, 0.2 s: most of the
time from a line written on a node to the line on screen (``bench/stream.py``), and of a
launch's last phase, where pdsh's ssh hands the first line over as it comes. This program
runs beside the log on the node's connection. Each time the follower waits, it tells the
program how far it has read; the program looks at the log's size every 10 ms until it
differs (a stat, nothing a node notices), writes one byte, and sleeps until the next wait.
The follower waits on that byte instead of sleeping. A busy follower (a flood) never
waits, so nothing rings: each ring is an SSH packet ddptui handles in Python, and
a stopping follower, which polls, leaves its doorbell asleep. It only rings: the lines
still travel by the follower's reads.

It ends when its stdin reaches end of file, which is what closing its channel gives (or
the SSH connection dropping, or ddptui dying), so nothing of it outlives its
follower by more than a tick. Should it fail to start, or die, the follower polls as before.
"""

from __future__ import annotations

import contextlib

from ddptui import nodeprog
from ddptui.nodeprog import doorbell
from ddptui.remote.nodeops import python_cmd
from ddptui.transport.base import Spawned, Transport, TransportError

#: The node program (:mod:`ddptui.nodeprog.doorbell`).
DOORBELL_SRC = nodeprog.source(doorbell)


def doorbell_cmd(python: str, log_path: str) -> str:
    return python_cmd(python, DOORBELL_SRC, log_path, no_site=True)


class Doorbell:
    """One follower's doorbell: :meth:`wait` returns as soon as the log has grown."""

    def __init__(self, transport: Transport, python: str, log_path: str) -> None:
        self._spawned: Spawned | None = None
        with contextlib.suppress(TransportError, OSError):
            self._spawned = transport.spawn(doorbell_cmd(python, log_path))

    @property
    def ringing(self) -> bool:
        """It runs (and has not been found dead): a wait ends when the log grows."""
        return self._spawned is not None

    def wait(self, offset: int, timeout: float) -> bool:
        """Up to ``timeout`` for the log to differ from ``offset`` bytes; True if it rang
        (a ring armed by an earlier wait may answer too: one read more). Once it is found
        dead, every wait returns False at once and the follower falls back to its poll."""
        spawned = self._spawned
        if spawned is None:
            return False
        try:
            spawned.send(b"%d\n" % offset)
        except (TransportError, OSError):
            self.close()
            return False
        got = spawned.read(timeout)
        if got is None:
            self.close()
            return False
        return bool(got)

    def close(self) -> None:
        spawned, self._spawned = self._spawned, None
        if spawned is not None:
            with contextlib.suppress(Exception):
                spawned.close()
