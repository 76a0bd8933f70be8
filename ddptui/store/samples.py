"""Telemetry in the store: each node's recent samples for the faces, every sample on disk.

Samples reach the store as events, through the same batches, engine wire and replica as
lines and metrics do. They are not part of the exactly-once mirror: nothing on a node keeps
them for a later replay, so ``telemetry.jsonl`` is appended as they come, and a sample of a
killed session's last second may be missing from it, never doubled.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from ddptui.store import rundir
from ddptui.telemetry.sample import NodeSample

#: Samples kept per node in memory: ten minutes at one a second.
HISTORY = 600


class NodeSamples:
    """Per node, its newest samples; with a run dir, also the writer of ``telemetry.jsonl``.
    Called under the store's locks: :meth:`add` under both, the rest as the store says."""

    def __init__(self, run_dir: Path | None = None, history: int = HISTORY) -> None:
        self.history = history
        self.nodes: dict[str, deque[NodeSample]] = {}
        self.samples = 0  # ever added: a face redraws only when this moved
        self._path = None if run_dir is None else run_dir / rundir.TELEMETRY
        self._file: IO[str] | None = None
        self._new: list[NodeSample] = []

    def add(self, sample: NodeSample) -> None:
        ring = self.nodes.get(sample.node)
        if ring is None:
            ring = self.nodes[sample.node] = deque(maxlen=self.history)
        ring.append(sample)
        self.samples += 1
        if self._path is not None:
            self._new.append(sample)

    def take_out(self, events: Sequence[Any]) -> Sequence[Any]:
        """``events`` without the samples of this batch, which go to ``telemetry.jsonl``
        instead (the mirror has no file for them); a batch without samples is not scanned."""
        if not self._new:
            return events
        new, self._new = self._new, []
        if self._file is None and self._path is not None:
            self._file = open(self._path, "a", encoding="utf-8")  # noqa: SIM115
        if self._file is not None:
            self._file.write("".join(json.dumps(s.to_record()) + "\n" for s in new))
            self._file.flush()
        return [e for e in events if type(e) is not NodeSample]

    def copy(self) -> dict[str, list[NodeSample]]:
        return {node: list(ring) for node, ring in self.nodes.items()}

    def restore(self, histories: dict[str, list[NodeSample]] | None) -> None:
        """A replica's start: the original's histories as its snapshot held them."""
        for node, samples in (histories or {}).items():
            self.nodes[node] = deque(samples, maxlen=self.history)
            self.samples += len(samples)

    def close(self, *, keep_writing: bool = True) -> None:
        """Close ``telemetry.jsonl``; ``keep_writing`` False: write no more samples to it
        (its disk is full), keeping them in memory only."""
        if not keep_writing:
            self._path, self._new = None, []
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


def read_telemetry(run_dir: Path, node: str | None = None) -> Iterator[NodeSample]:
    """The samples of a past or running run, in the order they were written; a torn last
    line (a killed session) is skipped."""
    path = run_dir / rundir.TELEMETRY
    if not path.exists():
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                sample = NodeSample.from_record(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue
            if node is None or sample.node == node:
                yield sample
