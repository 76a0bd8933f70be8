"""``ddptui stop RUN_ID``: every process of a run stopped on every node, from any shell.

A run followed by another ddptui on this machine is stopped on its nodes, and that ddptui
records the end; any other is reopened here, without following, and stopped by its session.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddptui.afterwards.stop_beside import followed_elsewhere, stop_beside
from ddptui.live.session import Session
from ddptui.outcome import LaunchError
from ddptui.store.runs import state_root

USAGE_EXIT = 2


def stop_run(state_dir: Path | None, run_id: str, grace: float | None) -> int:
    """0 when nothing of the run is left anywhere, 1 when a node keeps some or could not be
    reached (each said), 2 when there is no such run."""
    root = state_root(state_dir)
    if followed_elsewhere(root, run_id):  # its own session records the end
        print(f"ddptui: run {run_id} is followed by another ddptui on this machine; "
              "stopping it on its nodes, that ddptui records the end", flush=True)
        report = stop_beside(root, run_id, grace)
    else:
        try:
            session = Session.attach(run_id, state_root=state_dir, follow=False)
        except LaunchError as e:
            print(f"ddptui: {e}", file=sys.stderr)
            return USAGE_EXIT
        report = session.stop(grace)
    for node, err in report.errors.items():
        print(f"ddptui: node {node} could not be reached to stop the run there, so its "
              f"processes may still be running; run `ddptui stop {run_id}` again "
              f"once it answers. What connecting said: {err}", file=sys.stderr)
    for node, pids in report.leftover.items():
        state = "clean" if not pids else f"STILL RUNNING: {pids}"
        print(f"ddptui: node {node}: {state}")
    for node, facts in report.checked.items():
        print(f"ddptui: node {node} checked after the stop: {'; '.join(facts)}")
    return 0 if report.clean else 1
