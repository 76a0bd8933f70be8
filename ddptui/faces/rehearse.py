"""``ddptui rehearse RUN_ID``: the time limit's signal now, to every rank of a running run,
and its checkpoint looked for, so that a preemption is tried before one comes.

Like ``ddptui stacks`` it connects to the run's nodes on its own (the run may be followed by
a dashboard or a headless ``ddptui`` elsewhere, or by nothing) and changes nothing in the
run's local record: what it saw, it prints.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from ddptui.config import HostsConfig
from ddptui.events import Level
from ddptui.live.timelimit import TimeLimit
from ddptui.remote.reach import connect_all
from ddptui.run_state import RunRecord
from ddptui.store.runs import no_run, read_run
from ddptui.store.runs import state_root as resolve_state_root

USAGE_EXIT = 2
#: Seconds to look for the checkpoint after the signal, by default.
WAIT_S = 120.0


def rehearse(state_root: Path | None, run_id: str, *, wait: float = WAIT_S,
             out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """0 when a checkpoint newer than the signal was seen; 1 when none was (said why)."""
    root = resolve_state_root(state_root)
    try:
        meta = read_run(root, run_id)
    except (OSError, ValueError) as e:
        err.write(f"ddptui: {no_run(root, run_id, e)}\n")
        return USAGE_EXIT
    config = HostsConfig.from_dict(meta["config"])
    nodes = RunRecord.from_json(meta).nodes  # where each node's ranks run, and its node dir
    if not nodes:
        err.write(f"ddptui: run {run_id} has not started on its nodes; nothing to signal\n")
        return USAGE_EXIT
    transports = connect_all(config, lambda said: err.write(f"ddptui: {said}\n"))

    def note(node: str, text: str, level: Level) -> None:
        (err if level is Level.ERROR else out).write(f"ddptui: {text}\n")

    done = threading.Event()
    limit = TimeLimit(config, run_id, transports.__getitem__, lambda n: nodes[n].cwd,
                      lambda n: nodes[n].run_dir, note, lambda _n: None, done)
    try:
        said = limit.rehearse()  # says what it sent, through note
        if not limit.left_at_signal:  # no rank took it: no checkpoint to wait for
            err.write(f"ddptui: {said}\n")
            return 1
        deadline = time.monotonic() + wait
        while limit.found is None and time.monotonic() < deadline and limit.pattern:
            time.sleep(0.5)
        done.set()
        if limit.found is None:
            limit.say_absent(f"{wait:g} s after the signal" if limit.pattern else "after the "
                             "signal")
    finally:
        done.set()
        for t in transports.values():
            t.close()
    return 0 if limit.found is not None else 1
