"""``run.json``'s one writer: the run's typed record, changed and written under one lock.

Launch phases, the consumer (NCCL facts), the stop and the reaper all record into the same
file from their own threads; so do the commands that deal with a run afterwards (a stale
run settled, ``ddptui clean``'s note, a diagnosis made again). Before, each wrote a dict of
its own, one of them without the lock, and a key misspelt by one was a new key. Every change
here is a named, typed field of :class:`ddptui.run_state.RunRecord`, and the file is
rewritten whole through a rename, so a reader never sees half of it. No other module writes
``run.json`` (``tests/test_one_writer.py`` looks).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Unpack

from ddptui.run_state import NodeChanges, NodeRecord, RunChanges, RunRecord
from ddptui.store.owner import this_controller
from ddptui.store.rundir import RUN_JSON


class Recorder:
    """The run's record and its file; every method is safe from any thread."""

    def __init__(self, run_dir: Path, record: RunRecord) -> None:
        self.run_dir = run_dir
        self._record = record
        self._lock = threading.Lock()
        #: Why ``run.json`` could not be written (a full disk), once it could not: the run
        #: goes on in memory, and the faces say that its record here is behind.
        self.error: str | None = None

    @classmethod
    def controlling(cls, run_dir: Path, record: RunRecord) -> Recorder:
        """The record of a run this process follows (launched or attached): named in it as
        the run's controller, so that a listing can tell when it is gone (a stale run)."""
        return cls(run_dir, record.changed(controller=this_controller()))

    @classmethod
    def of_run(cls, run_dir: Path) -> Recorder:
        """The record ``run_dir`` holds, for a command that changes a run it does not follow;
        OSError when there is none, ValueError, KeyError or TypeError when it is not one."""
        data = json.loads((run_dir / RUN_JSON).read_text())
        if not isinstance(data, dict):
            raise TypeError(f"{run_dir / RUN_JSON} holds no record")
        return cls(run_dir, RunRecord.from_json(data))

    def update(self, **changes: Unpack[RunChanges]) -> None:
        """Set fields of the record and write it."""
        with self._lock:
            self._record = self._record.changed(**changes)
            self._write()

    def set_nodes(self, nodes: list[NodeRecord]) -> None:
        """The plan's nodes, recorded before any file is written on them."""
        with self._lock:
            self._record = self._record.with_nodes({n.name: n for n in nodes})
            self._write()

    def node(self, name: str, **changes: Unpack[NodeChanges]) -> None:
        """Set fields of one node's entry and write the record."""
        with self._lock:
            nodes = dict(self._record.nodes)
            nodes[name] = replace(nodes[name], **changes)
            self._record = self._record.with_nodes(nodes)
            self._write()

    def let_go(self) -> None:
        """This process follows the run no more (``ddptui attach`` takes it up again)."""
        self.update(controller={**this_controller(), "detached": True})

    def write(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        path = self.run_dir / RUN_JSON
        tmp = path.with_name(path.name + ".tmp")
        try:  # through a rename: a reader (``ddptui logs``, attach) never sees half of it
            tmp.write_text(json.dumps(self._record.to_json(), indent=2, default=str))
            os.replace(tmp, path)
        except OSError as e:
            self.error = self.error or f"cannot write {path}: {e.strerror}"

    # Reads: the record is never changed in place, so the one taken under the lock is a
    # reader's to keep.

    def record(self) -> RunRecord:
        with self._lock:
            return self._record

    def attempt(self) -> int:
        """Which attempt of its run this is (1 unless resubmitted, see ``slurm.resubmit``)."""
        a = self.record().attempt
        return a["number"] if a is not None else 1

    def has_nodes(self) -> bool:
        return bool(self.record().nodes)

    def nodes(self) -> dict[str, NodeRecord]:
        return dict(self.record().nodes)

    def pgid(self, name: str) -> int | None:
        rec = self.record().nodes.get(name)
        return rec.pgid if rec is not None else None

    def node_dir(self, name: str) -> str:
        return self.record().nodes[name].run_dir
