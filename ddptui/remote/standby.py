"""Each node's stop program, started with the run and waiting for the word.

A stop used to open a channel per node, which started a shell and an interpreter that
imported and read its arguments before the first SIGTERM: on sixteen nodes sharing two cores
(``bench/stop.py``) that took 0.3-0.5 s of the stop's second, and on real nodes it is a new
SSH session and interpreter each. So the same program (``nodeops.STOP_SRC``) is started on
every node once its followers are running, and waits on its stdin; a stop is then one line
(the grace) on a channel that is already open, and the result comes back on it as it
would from a fresh program.

A standby that cannot start, or whose connection was replaced (a reconnect), or that ends
without its result is not a failed stop: ddptui stops that node the usual way.
Closing the channel (the run's end, a detach, ddptui dying) gives the program end
of file, on which it exits without touching anything.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from ddptui.remote import nodeops
from ddptui.remote.reach import map_at_once
from ddptui.transport.base import Spawned, Transport, TransportError

#: How long a standby may take to say it heard: a connection that died without a word
#: (a partition) must not hold the stop for a grace before the usual stop is tried.
HEARD_TIMEOUT_S = 5.0
#: Beyond the grace, how long a standby that heard may take to report.
REPORT_SLACK_S = 30.0
#: How long a node's standby waits for its torchrun to speak before it starts anyway, and
#: how often it looks: started at once, its interpreter would compete with torch's import
#: (1-2 s of CPU) on the node for the cores, and a stop before then goes the usual way.
SPOKEN_WAIT_S = 10.0
SPOKEN_LOOK_S = 0.05


class Standby:
    """The run's waiting stop programs, one per node, each on that node's connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, tuple[Transport, Spawned]] = {}
        self._ended = False

    def start_all(self, names: list[str], transport: Callable[[str], Transport | None],
                  command: Callable[[str], str], spoken: Callable[[str], bool]) -> None:
        """:meth:`start` on every node at once, in the background, each once its torchrun
        has ``spoken`` (its import of torch is over), or after :data:`SPOKEN_WAIT_S`, on the
        node's connection then (none: a run detached or ended meanwhile, and nothing starts;
        ``transport`` must never connect anew, which would outlive the run)."""
        def when_spoken(name: str) -> None:
            deadline = time.monotonic() + SPOKEN_WAIT_S
            while not spoken(name) and not self._ended and time.monotonic() < deadline:
                time.sleep(SPOKEN_LOOK_S)
            on = None if self._ended else transport(name)
            if on is not None:
                self.start(name, on, command(name))

        threading.Thread(target=map_at_once, daemon=True, name="ddptui-standby",
                         args=(names, when_spoken)).start()

    def start(self, name: str, transport: Transport, command: str) -> None:
        """Start ``command`` (``nodeops.stop_cmd`` with no grace) on the node; quietly
        nothing when it cannot start: a stop then goes the usual way."""
        try:
            spawned = transport.spawn(command)
        except (TransportError, OSError):
            return
        with self._lock:
            old = self._waiting.pop(name, None)
            stale = [old[1]] if old is not None else []
            if self._ended:
                stale.append(spawned)
            else:
                self._waiting[name] = (transport, spawned)
        for s in stale:
            s.close()

    def stop(self, name: str, transport: Transport, grace: float) -> nodeops.StopResult | None:
        """Stop the run on ``name`` through its standby, if it waits on ``transport`` (the
        node's current connection); None when it cannot say: the caller stops it anew."""
        with self._lock:
            waiting = self._waiting.pop(name, None)
        if waiting is None:
            return None
        on, spawned = waiting
        try:
            if on is not transport:
                return None
            spawned.send(b"%g\n" % grace)
            out = b""
            asked = time.monotonic()
            deadline = asked + HEARD_TIMEOUT_S
            while (left := deadline - time.monotonic()) > 0:
                got = spawned.read(min(left, 1.0))
                if got is None:
                    break
                if got and not out:
                    deadline = asked + grace + REPORT_SLACK_S
                out += got
                if got.endswith(b"\n") and (found := nodeops.parse_stop(out.decode(
                        "utf-8", errors="replace"))) is not None:
                    return found
            return nodeops.parse_stop(out.decode("utf-8", errors="replace"))
        except (TransportError, OSError):
            return None
        finally:
            spawned.close()

    def end(self) -> None:
        """Close every waiting program (each exits on end of file); none starts after."""
        with self._lock:
            self._ended = True
            waiting, self._waiting = list(self._waiting.values()), {}
        for _, spawned in waiting:
            with contextlib.suppress(Exception):
                spawned.close()
