"""The only code that stops a node: every trigger (the user's stop, an aborted launch, a lost
node, the failure policy, the reaper, ``ddptui stop`` beside a live ddptui) comes here.

How a node is stopped depends on how it was reached: a strategy named by the transport's
``stop_kind``. Over SSH and locally it is signals: the node's stop program, waiting on
standby (:mod:`ddptui.remote.standby`) or started afresh, SIGTERMs every process of the run
there, waits for the grace, SIGKILLs what is left and reports what survived. A scheduler's
transport adds its own strategy (e.g. signalling and cancelling a job step) in
:data:`STRATEGIES`, and every trigger above uses it with no change.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ddptui.config import HostsConfig
from ddptui.events import Level
from ddptui.outcome import StopReport
from ddptui.remote import nodeops
from ddptui.remote.reach import map_at_once
from ddptui.remote.standby import Standby
from ddptui.run_state import NodeRecord
from ddptui.slurm import client
from ddptui.slurm.jobinfo import SlurmError
from ddptui.transport.base import Transport, TransportError
from ddptui.transport.srun import SrunTransport
from ddptui.transport.srun.names import step_name


@dataclass(frozen=True)
class StopTarget:
    """What a stop needs to know of one node's part of a run (from ``run.json``)."""

    python: str
    run_id: str
    node_rank: int
    pgid: int | None
    node_dir: str

    def command(self, grace: float | None) -> str:
        """The node's stop program; ``grace`` None: on standby, reading it from stdin."""
        return nodeops.stop_cmd(self.python, self.run_id, self.node_rank, grace, self.pgid,
                                self.node_dir)


def targets(config: HostsConfig, run_id: str, nodes: Callable[[], Mapping[str, NodeRecord]]
            ) -> Callable[[str], StopTarget]:
    """Each node's :class:`StopTarget`, from the run's record as ``nodes`` gives it when the
    stop comes (a pgid recorded late is used)."""
    def target(name: str) -> StopTarget:
        rec = nodes()[name]
        return StopTarget(config.node(name).python, run_id, rec.node_rank, rec.pgid,
                          rec.run_dir)
    return target


class StopStrategy(Protocol):
    def stop(self, name: str, transport: Transport, target: StopTarget, grace: float,
             standby: Standby | None) -> nodeops.StopResult:
        """Stop the run's processes on one node: what was found, killed and is still alive;
        raise :class:`TransportError` when it cannot say."""


class SignalStop:
    """SIGTERM, grace, SIGKILL, by the node's stop program (on standby or started anew)."""

    def stop(self, name: str, transport: Transport, target: StopTarget, grace: float,
             standby: Standby | None) -> nodeops.StopResult:
        found = standby.stop(name, transport, grace) if standby is not None else None
        if found is not None:
            return found
        res = transport.run(target.command(grace), timeout=grace + 60)
        parsed = nodeops.parse_stop(res.stdout)
        if parsed is None:
            raise TransportError(name, f"node {name}: the stop command failed (exit code "
                                       f"{res.exit_code}): {res.stderr.strip()[-300:]}")
        return parsed


class SlurmStop:
    """The node's stop program, as over SSH (SIGTERM to every process of the run there, the
    grace, SIGKILL, and what is left, confirmed), then the run's step cancelled and awaited
    until Slurm no longer lists it.

    No ``scancel --signal`` first: the stop program signals every process of the run, so
    Slurm's SIGTERM would be a second one, which interrupts torchrun's own shutdown; and
    Slurm's answer to it tells nothing (22.05 delivers a signal to a running step and
    answers "Invalid job id specified" all the same; a step that has ended is answered with
    success). A step may end by itself at any moment (another node's stop ended the
    rendezvous, and torchrun with it): the node's processes say whether the run stopped
    there, so such a node is stopped, not lost. A job Slurm has ended holds nothing any
    more, so a node of it that cannot be reached has nothing to stop."""

    def stop(self, name: str, transport: Transport, target: StopTarget, grace: float,
             standby: Standby | None) -> nodeops.StopResult:
        assert isinstance(transport, SrunTransport)
        job = transport.job
        try:
            found = SignalStop().stop(name, transport, target, grace, standby)
        except TransportError:
            try:
                if not client.job_running(job):
                    return nodeops.StopResult([], [], [])
            except SlurmError as e:
                raise TransportError(name, f"node {name}: neither the node nor Slurm could "
                                           f"say whether the run stopped there: {e}") from None
            raise
        with contextlib.suppress(SlurmError):  # the processes are gone: the step ends too
            for step in client.steps(job):
                if step.name == step_name(target.run_id) and step.nodes == transport.host:
                    with contextlib.suppress(SlurmError):  # it ended meanwhile
                        client.cancel(step.step_id)
                    client.wait_step_gone(step.step_id)
        return found


#: Stop strategies by the transports' ``stop_kind``.
STRATEGIES: dict[str, StopStrategy] = {"signals": SignalStop(), "slurm": SlurmStop()}

#: ddptui's words about a node, for every face (masked by the caller).
Note = Callable[[str, str, Level], None]


class Stopper:
    """Stops one node of one run, by its transport's strategy.

    Args:
        target: The node's :class:`StopTarget` (read from the run's record at stop time, so
            a pgid recorded late is used).
        transport: The node's open connection, reconnecting if it has none.
        standby: The run's waiting stop programs, if it has them (a live run).
        note: Says a kill after the grace where a person sees the run's lines.
    """

    def __init__(self, target: Callable[[str], StopTarget],
                 transport: Callable[[str], Transport], standby: Standby | None = None,
                 note: Note | None = None) -> None:
        self.target = target
        self.transport = transport
        self.standby = standby
        self.note = note

    def stop(self, name: str, grace: float, transport: Transport | None = None
             ) -> list[int]:
        """Stop the run on ``name``: the process ids still alive there afterwards."""
        return self.stop_found(name, grace, transport).leftover

    def stop_found(self, name: str, grace: float, transport: Transport | None = None
                   ) -> nodeops.StopResult:
        """Stop the run on ``name`` (through ``transport`` when given, e.g. a fresh
        connection of the reaper's): what was found there, killed, and is still alive."""
        t = transport if transport is not None else self.transport(name)
        strategy = STRATEGIES[t.stop_kind]
        found = strategy.stop(name, t, self.target(name), grace,
                              self.standby if transport is None else None)
        if found.killed and self.note is not None:
            self.note(name, f"{len(found.killed)} process(es) ignored SIGTERM for {grace:g} s "
                            "and were killed", Level.WARNING)
        return found


def stop_all(names: list[str], stop_one: Callable[[str], list[int]]) -> StopReport:
    """``stop_one`` on every node at once: what is left on each, and why a node could not
    be stopped (in the words of the exception that said so)."""
    report = StopReport()
    for name, res in zip(names, map_at_once(names, stop_one), strict=True):
        if isinstance(res, Exception):
            report.errors[name] = str(res)
        else:
            report.leftover[name] = res
    return report
