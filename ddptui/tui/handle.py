"""What the dashboard holds of a run: the shape of :class:`ddptui.engine.client.EngineClient`.

The real handle is a client of an engine process; tests pass stand-ins of this shape. Nothing
here imports the controller (paramiko), nor the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ddptui.chart.rows import Run
from ddptui.config import HostsConfig
from ddptui.nccl import NcclFacts
from ddptui.outcome import RunResult, StopReport
from ddptui.remote.stacks import Stacks
from ddptui.store.runs import RunSummary
from ddptui.store.store import Store

#: A chart as :func:`ddptui.chart.rows.store_chart` builds it: rows of runs, points per rank.
Chart = tuple[list[list[Run]], dict[int, int]]


class RunHandle(Protocol):
    """A run the dashboard follows: a store it reads, and calls that act on the run."""

    store: Store
    run_id: str
    #: The hosts file the run was launched from, when known: ``R`` launches it again.
    config: HostsConfig | None

    @property
    def done(self) -> bool:
        """The run has ended, or the handle lost it; :attr:`result` says how, if known."""

    @property
    def result(self) -> RunResult | None: ...

    def launch(self) -> None:
        """Start the run; raises :class:`ddptui.outcome.LaunchError` for what to fix."""

    def stop(self, grace: float | None = None) -> StopReport: ...

    def detach(self) -> None:
        """Stop following; the run goes on, to be attached again."""

    def process_estimate(self) -> tuple[int, int]:
        """(processes, nodes) of the run, without waiting on anything."""

    def pump(self) -> None:
        """Bring ``store`` up to date, a few ms at most (the dashboard calls it 100 times a
        second)."""

    def close(self) -> None:
        """Let go of the handle; a run still going is left going."""

    def stacks(self, rank: int | None = None) -> Stacks:
        """The ranks' Python stacks (``rank``'s only), taken on the nodes now; slow: call it
        off the loop."""

    def chart(self, metric: str, log_y: bool, width: int, height: int) -> Chart:
        """The chart of ``metric``, built where the series are; slow: call it off the loop."""

    def nccl_facts(self) -> NcclFacts:
        """What NCCL said so far on every node, from every NCCL line of the run; slow: call
        it off the loop."""


RunFactory = Callable[[HostsConfig, Path | None], RunHandle]
"""Builds a handle for a new run of a hosts file, under a state root."""
Attacher = Callable[[str, Path | None], RunHandle]
"""Builds a handle following the run of that id, under a state root."""
RunLister = Callable[[Path | None], list[RunSummary]]
"""The runs recorded under a state root, newest first."""
