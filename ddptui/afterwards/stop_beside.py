"""``ddptui stop`` while another session still follows the run (a dashboard elsewhere).

That session is the only writer of the run's store and ``run.json``: a second session
that replayed the same local mirror would truncate files the first one is appending to, and
the two would record two endings. So a stop beside a live session only asks every node to
stop the run (the node command leaves its ``stop_requested`` mark) and reports what is left;
the live session sees the ranks end and records the run as stopped, as if its own user had
pressed the key.
"""

from __future__ import annotations

from pathlib import Path

from ddptui.config import HostsConfig
from ddptui.outcome import StopReport
from ddptui.remote.nodeops import StopResult
from ddptui.remote.reach import connect
from ddptui.remote.stop import Stopper, stop_all, targets
from ddptui.run_state import RunRecord
from ddptui.store.owner import Owner, owner_of
from ddptui.store.runs import read_run
from ddptui.transport.base import Transport


def followed_elsewhere(root: Path, run_id: str) -> bool:
    """True when ``run.json`` names a session on this machine that is still alive."""
    try:
        meta = read_run(root, run_id)
    except (OSError, ValueError):
        return False
    return owner_of(meta) is Owner.ALIVE and meta.get("status") in (
        "launching", "running", "stopping")


def stop_beside(root: Path, run_id: str, grace: float | None) -> StopReport:
    """Stop the run on every node at once, touching nothing of its local run directory."""
    record = RunRecord.from_json(read_run(root, run_id))
    config = HostsConfig.from_dict(record.config)
    grace = config.job.stop_grace if grace is None else grace

    def fresh(name: str) -> Transport:
        return connect(config.node(name), config)

    stopper = Stopper(targets(config, run_id, lambda: record.nodes), fresh)

    def stop_one(name: str) -> StopResult:
        transport = fresh(name)
        try:
            return stopper.stop_found(name, grace, transport)
        finally:
            transport.close()

    report = stop_all(list(record.nodes), stop_one)
    for name, why in report.errors.items():
        report.errors[name] = (f"could not be stopped ({why}); its processes may still run "
                               f"there: try `ddptui stop {run_id}` again")
    return report
