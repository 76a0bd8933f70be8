"""The run's interface, written once: what an engine runs, what the dashboard holds, what a
test fakes.

It was written four times (the session, the engine's ``Runnable``, the dashboard's
``RunHandle``, the engine's client), and a fake that lacked two methods went unnoticed. Now
each side is checked against this one by mypy, structurally: the session where the engine
builds one (:func:`ddptui.engine.process.new_run`), the engine's client where the dashboard
opens one (``ddptui.tui.app``), the tests' stand-ins in ``tests/fakes.py``.

A plain module: it imports no launch, live, remote, engine or tui module, so each of those
sides may import it without a circle.
"""

from __future__ import annotations

from typing import Protocol

from ddptui.chart.view import ChartView, Drawn
from ddptui.config import HostsConfig
from ddptui.nccl import NcclFacts
from ddptui.outcome import RunResult, StopReport
from ddptui.rank_stacks import Stacks
from ddptui.store.store import Store


class RunPort(Protocol):
    """One run: its store, and what acts on it. Read-only members, so that a session whose
    ``config`` is never None satisfies it as well as a handle that may not know its own."""

    @property
    def store(self) -> Store: ...

    @property
    def run_id(self) -> str: ...

    @property
    def config(self) -> HostsConfig | None:
        """The hosts file the run was launched from, when known: ``R`` launches it again."""

    @property
    def done(self) -> bool:
        """The run has ended, or its follower lost it; :attr:`result` says how, if known."""

    @property
    def result(self) -> RunResult | None: ...

    def launch(self) -> None:
        """Start the run; raises :class:`ddptui.outcome.LaunchError` for what to fix."""

    def stop(self, grace: float | None = None) -> StopReport: ...

    def again(self) -> str | None:
        """Once the run is over: why it is to be tried again in a new allocation (its time
        limit or a preemption ended it, ``slurm.resubmit``); None when it is not."""

    def rehearse(self) -> str:
        """The time limit's signal to every rank now (``slurm.signal``), its checkpoint
        looked for as at the limit: a preemption, tried before one comes. What was done."""

    def detach(self) -> None:
        """Stop following; the run goes on, to be attached again."""

    def nccl_facts(self) -> NcclFacts:
        """What NCCL said so far on every node, from every NCCL line of the run; slow: off
        the dashboard's loop."""

    def stacks(self, rank: int | None = None) -> Stacks:
        """The ranks' Python stacks (``rank``'s only), taken on the nodes now, saved in the
        run dir with secrets hidden; slow (py-spy): off the dashboard's loop."""


class RunHandle(RunPort, Protocol):
    """The run as the dashboard holds it from another process: the run's interface, and the
    upkeep of a replica store that the session, owning the store itself, has no need of."""

    def process_estimate(self) -> tuple[int, int]:
        """(processes, nodes) of the run, without waiting on anything."""

    def pump(self) -> None:
        """Bring ``store`` up to date, a few ms at most (the dashboard calls it 100 times a
        second)."""

    def close(self) -> None:
        """Let go of the handle; a run still going is left going."""

    def chart(self, view: ChartView, width: int, height: int) -> Drawn:
        """The chart of ``metric``, built where the series are; slow: off the loop."""
