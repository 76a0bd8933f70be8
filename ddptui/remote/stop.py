"""The only code that stops a node: every trigger (the user's stop, an aborted launch, a lost
node, the failure policy, the reaper, ``ddptui stop`` beside a live ddptui) comes here.

The stop itself is signals: the node's stop program, waiting on standby
(:mod:`ddptui.remote.standby`) or started afresh, SIGTERMs every process of the run there,
waits for the grace, SIGKILLs what is left and reports what survived. The node's transport
owns the rest (:meth:`ddptui.transport.base.Transport.stop_run`): a scheduler's transport
adds what its way of reaching the node needs (cancelling the run's job step), and every
trigger above uses it with no change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ddptui.config import HostsConfig
from ddptui.events import Level
from ddptui.outcome import StopReport
from ddptui.remote import nodeops
from ddptui.remote.reach import Failed, map_at_once
from ddptui.remote.standby import Standby
from ddptui.run_state import NodeRecord
from ddptui.transport.base import Transport, TransportError


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


def by_signals(name: str, transport: Transport, target: StopTarget, grace: float,
               standby: Standby | None) -> nodeops.StopResult:
    """SIGTERM, grace, SIGKILL, by the node's stop program (on standby or started anew): what
    was found, killed and is still alive; :class:`TransportError` when it cannot say."""
    found = standby.stop(name, transport, grace) if standby is not None else None
    if found is not None:
        return found
    res = transport.run(target.command(grace), timeout=grace + 60)
    parsed = nodeops.parse_stop(res.stdout)
    if parsed is None:
        raise TransportError(name, f"node {name}: the stop command failed (exit code "
                                   f"{res.exit_code}): {res.stderr.strip()[-300:]}")
    return parsed


#: ddptui's words about a node, for every face (masked by the caller).
Note = Callable[[str, str, Level], None]


class Stopper:
    """Stops one node of one run: the stop program's signals, in its transport's way.

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
        target = self.target(name)
        standby = self.standby if transport is None else None
        found = t.stop_run(target.run_id, lambda: by_signals(name, t, target, grace, standby))
        if found is None:  # nothing of the run is left there to stop
            found = nodeops.StopResult([], [], [])
        elif not found.leftover:
            found.checked.insert(0, "no process of the run is left")
        if found.killed and self.note is not None:
            self.note(name, f"{len(found.killed)} process(es) ignored SIGTERM for {grace:g} s "
                            "and were killed", Level.WARNING)
        return found


def stop_all(names: list[str], stop_one: Callable[[str], nodeops.StopResult]) -> StopReport:
    """``stop_one`` on every node at once: what is left on each, what was checked gone, and
    why a node could not be stopped (in the words of the exception that said so)."""
    report = StopReport()
    for res in map_at_once(names, stop_one):
        if isinstance(res, Failed):
            report.errors[res.item] = str(res.error)
        else:
            report.leftover[res.item] = res.value.leftover
            if res.value.checked:
                report.checked[res.item] = list(res.value.checked)
    return report
