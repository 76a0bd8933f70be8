"""ddptui's own troubles during a run, as opposed to the job's: a disk here that is full, a
thread of its own that failed. Each is said once, in ddptui's words, where the run's lines
are shown, and the run's result carries them, so no face ends a run as if all were well.

Neither stops the run. On a full disk the store, the raw copies and ``run.json`` stop
writing (each keeps going in memory), and ``ddptui attach`` fetches what is missing from the
nodes once there is room. A thread of ddptui's own that raises goes on with its next piece of
work (the consumer with its next batch; a follower that fails ends its node as lost, named).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from ddptui.events import Level

#: ddptui's words about a node, for every face.
Note = Callable[[str, str, Level], None]


class OwnFaults:
    """Args:
        run_id: For what ddptui tells a person to type.
        node: The node a fault of the whole run is shown on (the first).
        note: Says a fault where the run's lines are shown.
    """

    def __init__(self, run_id: str, node: str, note: Note) -> None:
        self.run_id, self.node, self.note = run_id, node, note
        self._said: dict[str, str] = {}  # where -> what, in the order they came
        self._lock = threading.Lock()

    def check(self, store: str | None, record: str | None,
              copies: Mapping[str, str | None]) -> None:
        """Say each new disk fault: the store's, ``run.json``'s, each node's raw copy's."""
        if store is not None:
            self._say("store", self.node, f"ddptui can no longer keep this run's lines on this "
                      f"machine ({store}). The run goes on and its lines are still shown, but "
                      f"from here on they are not stored; once there is room, `ddptui attach "
                      f"{self.run_id}` fetches them from the nodes, even after the run's end.")
        if record is not None:
            self._say("record", self.node, f"ddptui cannot record this run's state ({record}); "
                      f"once there is room, `ddptui logs --check {self.run_id}` records how it "
                      "ended.")
        for node, why in copies.items():
            if why is not None:
                self._say(f"copy {node}", node, f"ddptui can no longer copy node {node}'s log "
                          f"here ({why}); `ddptui attach {self.run_id}` fetches the rest once "
                          "there is room.")

    def failed(self, what: str, e: Exception) -> None:
        """A thread of ddptui's own (``what``) raised: it goes on with its next piece of work,
        and the fault is said once; the run's result carries it."""
        self._say(f"failed {what}", self.node, f"ddptui's own {what} failed ({e!r}); it goes "
                  "on, but what it was doing then may be missing here: `ddptui attach "
                  f"{self.run_id}` reads the nodes' logs again.")

    def _say(self, key: str, node: str, text: str) -> None:
        with self._lock:
            if key in self._said:
                return
            self._said[key] = text
        try:
            self.note(node, text, Level.ERROR)
        except Exception:  # the store that would show it may be what failed: the result says it
            return

    def text(self) -> str | None:
        """Every fault said, for the run's result (None when there was none)."""
        with self._lock:
            return " ".join(self._said.values()) or None
