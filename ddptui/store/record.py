"""``run.json``'s one writer: the run's typed record, changed and written under one lock.

Launch phases, the consumer (NCCL facts), the stop and the reaper all record into the same
file from their own threads; before, each wrote a shared dict, one of them without the lock.
Every change here is a named field of :class:`ddptui.run_state.RunRecord`, and the file is
rewritten whole through a rename, so a reader never sees half of it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ddptui.run_state import NodeRecord, RunRecord
from ddptui.store.rundir import RUN_JSON
from ddptui.store.runs import write_run


class Recorder:
    """The run's record and its file; every method is safe from any thread."""

    def __init__(self, run_dir: Path, record: RunRecord) -> None:
        self.run_dir = run_dir
        self._record = record
        self._lock = threading.Lock()
        #: Why ``run.json`` could not be written (a full disk), once it could not: the run
        #: goes on in memory, and the faces say that its record here is behind.
        self.error: str | None = None

    def update(self, **changes: Any) -> None:
        """Set fields of the record and write it."""
        with self._lock:
            self._record.update(**changes)
            self._write()

    def set_nodes(self, nodes: list[NodeRecord]) -> None:
        """The plan's nodes, recorded before any file is written on them."""
        with self._lock:
            self._record.nodes = {n.name: n for n in nodes}
            self._write()

    def node(self, name: str, **changes: Any) -> None:
        """Set fields of one node's entry and write the record."""
        with self._lock:
            rec = self._record.nodes[name]
            for key, value in changes.items():
                if not hasattr(rec, key):
                    raise KeyError(f"run.json's nodes have no field {key!r}")
                setattr(rec, key, value)
            self._write()

    def write(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        try:
            write_run(self.run_dir, self._record.to_json())
        except OSError as e:
            self.error = self.error or f"cannot write {self.run_dir / RUN_JSON}: {e.strerror}"

    # Reads: each a copy or an immutable value, taken under the lock.

    def has_nodes(self) -> bool:
        with self._lock:
            return bool(self._record.nodes)

    def nodes(self) -> dict[str, NodeRecord]:
        with self._lock:
            return {n: NodeRecord(**vars(r)) for n, r in self._record.nodes.items()}

    def pgid(self, name: str) -> int | None:
        with self._lock:
            rec = self._record.nodes.get(name)
            return rec.pgid if rec is not None else None

    def node_dir(self, name: str) -> str:
        with self._lock:
            return self._record.nodes[name].run_dir

    def get(self, name: str) -> Any:
        """One top-level field's value (a reader's copy for containers)."""
        with self._lock:
            value = getattr(self._record, name)
            return list(value) if isinstance(value, list) else (
                dict(value) if isinstance(value, dict) else value)
