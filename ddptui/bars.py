"""Progress bars: each rank's live bar line, and which of its states are kept.

A rank's line rewritten by carriage returns (tqdm, Lightning, HF Trainer, rich, pip) reaches
the session as *bar states*: one :class:`~ddptui.events.LogLine` per state, with ``bar``
set (the node's tee marks them, see :mod:`ddptui.nodeprog.torchrun_tee`). On a terminal each
state writes over the last, and a bar refreshed 100 times a second for hours is one line. So
here, per rank, a *bar slot*: a new state takes the place of the rank's live one; an ordinary
line of the rank ends the slot (the last state stays where it was, the line goes below).

:class:`BarKeeper` decides which states the run keeps (its stored logs, ``ddptui logs``, the
headless output, the dashboard's rings): at most one a second per rank, plus the last before
an ordinary line of the rank, its node's next state, or the end, so a bar's final state is
never lost and nothing else is dropped or moved. :class:`BarRows` places lines in a growing
list of shown lines, the rank's live state in place. Both are pure: time is the events'
(or the caller's ``now``), so the policy is tested without a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddptui.events import Event, LineRun, LogLine, Metric, NodeState

#: Seconds between two kept states of one rank's bar.
EVERY_S = 1.0


@dataclass(slots=True)
class _Slot:
    kept: float  # when a state of the rank was last let through
    held: LogLine | None = None  # its newest state since: the only one a rank holds


class BarKeeper:
    """Lets through at most one bar state a second per rank, and each rank's last state before
    anything that would bury it; every other event passes as it is, in order. Memory: one
    held state per rank that has a bar."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self.every_s = every_s
        self._slots: dict[int, _Slot] = {}
        self._held = 0  # slots holding a state: the common case (none) costs one test

    def take(self, events: list[Event]) -> list[Event]:
        """``events`` with the states that come too soon held back, and the held states that
        something now follows put back before it."""
        if not self._held and not any(type(e) is LogLine and e.bar for e in events):
            return events
        out: list[Event] = []
        for e in events:
            if isinstance(e, LogLine) and e.bar:
                self._state(e, out)
                continue
            if self._held:
                if isinstance(e, LogLine | LineRun) or (isinstance(e, Metric) and e.text):
                    self._ordinary(e, out)
                elif isinstance(e, NodeState):
                    self._release(out, node=e.node)
            out.append(e)
        return out

    @property
    def holding(self) -> bool:
        return self._held > 0

    def due(self, now: float) -> list[Event]:
        """Held states whose second has passed by ``now``: a bar that stopped moving shows its
        newest state within a second, not only at its next line."""
        out: list[Event] = []
        if self._held:
            for slot in self._slots.values():
                if slot.held is not None and now - slot.kept >= self.every_s:
                    out.append(slot.held)
                    slot.held, slot.kept = None, now
                    self._held -= 1
        return out

    def drain(self) -> list[Event]:
        """Every held state (the run's end)."""
        out: list[Event] = []
        self._release(out)
        return out

    def _state(self, line: LogLine, out: list[Event]) -> None:
        rank = -1 if line.rank is None else line.rank
        slot = self._slots.get(rank)
        if slot is None:
            self._slots[rank] = _Slot(line.time)
            out.append(line)
        elif line.time - slot.kept >= self.every_s:
            if slot.held is not None:
                slot.held = None
                self._held -= 1
            slot.kept = line.time
            out.append(line)
        else:
            if slot.held is None:
                self._held += 1
            slot.held = line

    def _ordinary(self, e: LogLine | LineRun | Metric, out: list[Event]) -> None:
        """A rank's line ends its slot: its held state goes first, unless the line is that
        state itself (a bar's final state, which the node sends as a line once it ends)."""
        if e.rank is None:
            return
        slot = self._slots.get(e.rank)
        if slot is None or slot.held is None:
            return
        if type(e) is not LogLine or e.text != slot.held.text:
            out.append(slot.held)
        slot.held = None
        self._held -= 1

    def _release(self, out: list[Event], node: str | None = None) -> None:
        for slot in self._slots.values():
            if slot.held is not None and (node is None or slot.held.node == node):
                out.append(slot.held)
                slot.held = None
                self._held -= 1


class BarRows:
    """Where each rank's live bar line is in a list of shown lines that grows at its end (the
    dashboard's log): a state replaces it, an ordinary line of the rank ends it. Lines are
    counted from the list's start, so the caller maps a place to what it still holds."""

    def __init__(self) -> None:
        self.count = 0  # lines placed so far
        self._live: dict[int | None, tuple[int, str]] = {}  # rank: (its live line, the text)
        #: Which of the last :meth:`place`'s lines made the lines it added, by index.
        self.made: list[int] = []

    @property
    def live(self) -> bool:
        """Some rank has a live bar line (then each line's rank counts)."""
        return bool(self._live)

    def place(self, shown: list[tuple[str, int | None, bool]]
              ) -> tuple[list[str], dict[int, str]]:
        """(lines to add at the end, {an earlier line: its new text}) for ``shown``'s
        (text, rank, is a bar state) in order."""
        new: list[str] = []
        changed: dict[int, str] = {}
        base = self.count
        live = self._live
        made = self.made = []
        for i, (text, rank, bar) in enumerate(shown):
            at = live.pop(rank, None) if (bar or live) else None
            if at is not None and (bar or at[1] == text):  # a state, or the last one made a line
                where = at[0]
                if where >= base:
                    new[where - base] = text
                else:
                    changed[where] = text
                if bar:
                    live[rank] = (where, text)
                continue
            if bar:
                live[rank] = (base + len(new), text)
            new.append(text)
            made.append(i)
        self.count = base + len(new)
        return new, changed
