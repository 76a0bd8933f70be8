"""The run's NCCL facts (:mod:`ddptui.nccl`), gathered in one place: kept up as the
session's lines arrive, saved in ``run.json``, put in the store for every face, and read
back from a run directory's raw node logs.

:class:`NcclWatch` is the one gatherer: a live run, an attach and a settled run
(``ddptui nccl``) all feed it NCCL lines through :meth:`NcclWatch.add`, so that no two
ways of reading them can tell a face different facts. The dashboard gathers none: it reads
the facts from its replica of the store (:attr:`ddptui.store.views.RunInfo.nccl`).

Live, the facts see only the lines the event parser already classed as NCCL, handed over a
batch at a time by :class:`ddptui.live.evidence.Evidence`, whose loop looks at every line
anyway; so a run without ``NCCL_DEBUG`` pays one comparison per line for them. From disk
(``ddptui nccl``, an attach), only lines holding NCCL's token reach the event parser.
"""

from __future__ import annotations

import pickle
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ddptui.events import LogLine, Source
from ddptui.nccl import NcclFacts, nccl_warnings
from ddptui.nodelog import NodeLogParser
from ddptui.run_notes import NcclMeta
from ddptui.store import rundir

#: ``run.json`` is rewritten with the facts at most this often while NCCL lines arrive (and
#: once more when the run ends): a communicator's init is seen there within seconds, and a
#: flood of NCCL_DEBUG_SUBSYS=COLL lines costs one small write per period.
SAVE_EVERY_S = 5.0
#: A raw log is read in pieces of this size, so a long run's log is never held whole.
CHUNK = 16 << 20

_NCCL_LINE = re.compile(rb"^.*NCCL.*$", re.M)


class NcclWatch:
    """The facts of one run, fed on the session's consumer thread and read from others
    (the engine's reply to the dashboard), hence the lock; it is taken once per batch."""

    def __init__(self) -> None:
        self.facts = NcclFacts()
        self._lock = threading.Lock()
        self._dirty = False
        self._next_save = 0.0

    def add(self, lines: Iterable[LogLine], *, timed: bool = True) -> None:
        """Lines the event parser classed as NCCL; ``timed=False`` for lines read back from a
        raw log, whose times are not when NCCL printed them."""
        with self._lock:
            feed = self.facts.feed
            for ln in lines:
                feed(ln.node, ln.rank, ln.text, ln.time if timed else None)
        self._dirty = True

    @classmethod
    def of_run(cls, run_dir: Path, nodes: Iterable[str], saved: object = None) -> NcclWatch:
        """A run's facts so far from its raw node logs (which hold every line, whatever the
        store's rings let go), with the init times ``saved`` (``run.json``'s facts) kept."""
        watch = cls()
        for node in nodes:
            watch.add(raw_nccl_lines(run_dir, node), timed=False)
        keep_line_times(watch.facts, saved)
        watch._dirty = False
        return watch

    def publish(self, record: Callable[..., None], set_run: Callable[..., None],
                **with_them: object) -> None:
        """The facts to ``run.json`` (``record``: the recorder's update, ``with_them`` in the
        same write) and to the store (``set_run``), where every face reads them."""
        record(**self.meta(), **with_them)
        set_run(nccl=self.snapshot())

    def due(self) -> bool:
        """New facts since ``run.json`` last had them, and the period is over."""
        return self._dirty and time.monotonic() >= self._next_save

    def meta(self) -> NcclMeta:
        """The facts and ddptui's warnings as ``run.json`` keeps them (only JSON types)."""
        with self._lock:
            self._dirty = False
            self._next_save = time.monotonic() + SAVE_EVERY_S
            return facts_meta(self.facts)

    def snapshot(self) -> NcclFacts:
        """A copy the caller may read while lines go on arriving (it pickles: the engine
        sends it to the dashboard as it is)."""
        with self._lock:
            copy: NcclFacts = pickle.loads(pickle.dumps(self.facts))
        return copy

    def reread(self, run_dir: Path, nodes: Iterable[str], saved: Any = None) -> None:
        """An attached run's facts so far (:meth:`of_run`)."""
        facts = NcclWatch.of_run(run_dir, nodes, saved).facts
        with self._lock:
            self.facts = facts
            self._dirty = False


def facts_meta(facts: NcclFacts) -> NcclMeta:
    """The warnings beside the facts, so that a script reading ``run.json`` needs no
    ddptui to know what is wrong."""
    return {"nccl": facts.to_dict(),
            "nccl_warnings": [w.to_dict() for w in nccl_warnings(facts)]}


def _raw_lines(node: str, data: bytes) -> Iterable[LogLine]:
    """The NCCL lines among whole lines of a node's raw log (torchrun's output as the node
    wrote it), as the event parser makes them live."""
    parser = NodeLogParser(node)
    for m in _NCCL_LINE.finditer(data):
        for ev in parser.feed(m.group().decode("utf-8", "replace"), 0.0):
            if type(ev) is LogLine and ev.source is Source.NCCL:
                yield ev


def raw_nccl_lines(run_dir: Path, node: str) -> Iterable[LogLine]:
    """A node's NCCL lines from the run directory's raw copy of its log (none without one),
    read a piece at a time."""
    path = rundir.node_log(run_dir, node)
    if not path.exists():
        return
    with open(path, "rb") as f:
        rest = b""
        while chunk := f.read(CHUNK):
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            yield from _raw_lines(node, data[:cut])
            rest = data[cut:]
        yield from _raw_lines(node, rest)


def facts_from_raw(run_dir: Path, nodes: Iterable[str]) -> NcclFacts:
    """Every node's facts from the raw logs alone, without ``run.json``'s init times."""
    return NcclWatch.of_run(run_dir, nodes).facts


def keep_line_times(facts: NcclFacts, saved: Any) -> None:
    """Put back the Init START/COMPLETE arrival times that ``run.json``'s facts recorded
    live, which the raw logs do not hold, onto the same node, process and communicator."""
    if not isinstance(saved, dict) or not isinstance(saved.get("nodes"), dict):
        return
    for node, nd in saved["nodes"].items():
        have = facts.nodes.get(node)
        ranks = nd.get("ranks") if isinstance(nd, dict) else None
        if have is None or not isinstance(ranks, dict):
            continue
        for label, rd in ranks.items():
            r = have.ranks.get(label)
            comms = rd.get("comms") if isinstance(rd, dict) else None
            if r is None or not isinstance(comms, dict):
                continue
            for ptr, cd in comms.items():
                c = r.comms.get(ptr)
                if c is not None and c.started is None and isinstance(cd, dict):
                    c.started, c.completed = _num(cd.get("started")), _num(cd.get("completed"))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None
