"""``ddptui stacks RUN_ID [--rank N]``: where each rank of a running run is, right now.

It connects to the run's nodes on its own (the run may be followed by a dashboard or a
headless ``ddptui`` elsewhere, or by nothing) and leaves the run's local record alone but for
the saved stacks file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from ddptui.config import HostsConfig
from ddptui.config.secrets import config_masker
from ddptui.rank_stacks import stacks_lines
from ddptui.remote.reach import connect_all
from ddptui.remote.stacks import take
from ddptui.store import rundir
from ddptui.store.runs import no_run, read_run
from ddptui.store.runs import state_root as resolve_state_root

USAGE_EXIT = 2


def show_stacks(state_root: Path | None, run_id: str, *, rank: int | None = None,
                out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Print the stacks; 0 when there was one to show, 1 when none (the reason is said)."""
    root = resolve_state_root(state_root)
    try:
        meta = read_run(root, run_id)
    except (OSError, ValueError) as e:
        err.write(f"ddptui: {no_run(root, run_id, e)}\n")
        return USAGE_EXIT
    config = HostsConfig.from_dict(meta["config"])
    transports = connect_all(config, lambda said: err.write(f"ddptui: {said}\n"))
    try:
        stacks = take(run_id, config, transports, rundir.run_dir(root, run_id), rank=rank,
                      mask=config_masker(config).text)
    finally:
        for t in transports.values():
            t.close()
    out.write("\n".join(stacks_lines(stacks, rank)) + "\n")
    out.write(f"ddptui: saved to {stacks.saved}\n")
    found = stacks.for_rank(rank) if rank is not None else next(
        (s for n in stacks.nodes for s in n.ranks), None)
    return 0 if found is not None and found.stack.strip() else 1
