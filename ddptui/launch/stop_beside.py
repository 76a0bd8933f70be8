"""``ddptui stop`` while another controller still follows the run (a dashboard elsewhere).

That controller is the only writer of the run's store and ``run.json``: a second controller
that replayed the same local mirror would truncate files the first one is appending to, and
the two would record two endings. So a stop beside a live controller only asks every node to
stop the run (the node command leaves its ``stop_requested`` mark) and reports what is left;
the live controller sees the ranks end and records the run as stopped, as if its own user had
pressed the key.
"""

from __future__ import annotations

from pathlib import Path

from ddptui.config import HostsConfig
from ddptui.launch import nodeops
from ddptui.launch.outcome import StopReport
from ddptui.launch.reach import connect, map_at_once
from ddptui.store.owner import Owner, owner_of
from ddptui.store.runs import read_run


def followed_elsewhere(root: Path, run_id: str) -> bool:
    """True when ``run.json`` names a controller on this machine that is still alive."""
    try:
        meta = read_run(root, run_id)
    except (OSError, ValueError):
        return False
    return owner_of(meta) is Owner.ALIVE and meta.get("status") in (
        "launching", "running", "stopping")


def stop_beside(root: Path, run_id: str, grace: float | None) -> StopReport:
    """Stop the run on every node at once, touching nothing of its local run directory."""
    meta = read_run(root, run_id)
    config = HostsConfig.from_dict(meta["config"])
    grace = config.job.stop_grace if grace is None else grace
    nodes = {n["name"]: n for n in meta.get("nodes", [])}

    def stop_one(name: str) -> list[int]:
        node = config.node(name)
        transport = connect(node, config)
        try:
            rec = nodes[name]
            res = transport.run(nodeops.stop_cmd(node.python, run_id, rec["node_rank"], grace,
                                                 rec.get("pgid"), rec["run_dir"]),
                                timeout=grace + 60)
        finally:
            transport.close()
        parsed = nodeops.parse_stop(res.stdout)
        if parsed is None:
            raise RuntimeError(f"the stop command failed there (exit code {res.exit_code}): "
                               f"{res.stderr.strip()[-300:]}")
        return parsed.leftover

    report = StopReport()
    names = list(nodes)
    for name, res in zip(names, map_at_once(names, stop_one), strict=True):
        if isinstance(res, Exception):
            report.errors[name] = (f"could not be stopped ({res}); its processes may still "
                                   f"run there: try `ddptui stop {run_id}` again")
        else:
            report.leftover[name] = res
    return report
